"""The house (ARCHITECTURE.md): imports go one way, and types are not given up to keep them so. `lint-imports`
checks the layers in CI; this checks what a layers contract cannot see, a circle inside one layer
(session/run <-> session/launch, say), counting lazy and type-only imports too, as grimp reads them; a class of
the package aliased to ``Any``; a part of a session reaching into another's private fields; and that mypy's
configuration keeps its strictness."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")


def _circles(graph):
    """The strongly connected groups of two or more modules (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return out


def test_no_import_circles():
    graph = grimp.build_graph("memscope", include_external_packages=False)
    assert len(graph.modules) > 50  # the whole package was read
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    class Graph:  # a, b import each other; c imports a
        modules = {"a", "b", "c"}
        edges = {"a": {"b"}, "b": {"a"}, "c": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert _circles(Graph()) == [["a", "b"]]


# -- the contracts catch what they claim to: one planted violation of each kind, in a copy --------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = "Layers: each imports only those below it"
AGENT = "The agent is closed: standard library and itself only, at its top level"
INDEPENDENT = "The views and the exporters are independent of each other"
LAYER0 = "Layer 0 is standard library only"

# (what is planted, the file it goes in, the line, the contract that must break)
PLANTED = [
    ("an upward import between layers", "record/reader.py", "import memscope.session\n", LAYERS),
    ("ui importing export", "ui/terminal.py", "import memscope.export\n", INDEPENDENT),
    ("a third-party import at layer 0", "fmt.py", "import pynvml\n", LAYER0),
    ("a lazy third-party import at layer 0", "model.py", "def _f():\n    import pandas\n", LAYER0),
    ("a third-party import at the agent's top level", "agent/fds.py", "import psutil\n", AGENT),
    ("the agent importing memscope.model", "agent/channel.py", "from memscope import model\n", AGENT),
    (
        "a third-party import in the agent's else of TYPE_CHECKING",
        "agent/fds.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n    import numpy\n",
        AGENT,
    ),
    ("a package module outside every layer", "newpart.py", "", LAYERS),
]


def _lint_copy(tmp_path, plant=None):
    """Run lint-imports on a copy of the package (and its config) with `plant` = (file, text) appended."""
    shutil.copytree(os.path.join(ROOT, "memscope"), tmp_path / "memscope", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "house_contracts.py"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    if plant is not None:
        with open(tmp_path / "memscope" / plant[0], "a") as f:
            f.write("\n" + plant[1])
    lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    p = subprocess.run([lint, "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = " ".join((p.stdout + p.stderr).split())  # long contract names wrap in the report
    return p.returncode, out


@pytest.mark.parametrize(
    "plant",
    [
        ("agent/fds.py", "def _f():\n    import psutil\n"),  # lazy: loaded only where it is called
        ("agent/fds.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numpy\n"),  # never runs
    ],
    ids=["a lazy import", "a type-only import"],
)
def test_the_agent_may_import_a_package_where_it_never_loads_at_import_time(tmp_path, plant):
    rc, out = _lint_copy(tmp_path, plant)
    assert rc == 0, out
    assert f"{AGENT} KEPT" in out


def test_the_unplanted_copy_keeps_every_contract(tmp_path):
    rc, out = _lint_copy(tmp_path)
    assert rc == 0, out
    for name in (LAYERS, AGENT, INDEPENDENT, LAYER0):
        assert f"{name} KEPT" in out
    # the agent's probes import numpy inside a function: the allow-list lets that through (it runs only in a
    # process that already loaded numpy)
    with open(os.path.join(ROOT, "memscope", "agent", "probes", "numpy_load.py")) as f:
        assert "    from numpy" in f.read()


@pytest.mark.parametrize("what,path,text,contract", PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_violation_breaks_its_contract(tmp_path, what, path, text, contract):
    rc, out = _lint_copy(tmp_path, (path, text))
    assert rc != 0, out
    assert f"{contract} BROKEN" in out, out


# -- the standalone pages: one page layer (ui/page.py) -------------------------------------------------------------

PAGES = ("report.py", "snapshot_view.py", "cluster.py")


def _tree(*parts):
    with open(os.path.join(ROOT, "memscope", *parts)) as f:
        return ast.parse(f.read())


def test_the_standalone_pages_are_assembled_by_the_page_layer_only():
    ui = os.path.join(ROOT, "memscope", "ui")
    for name in sorted(os.listdir(ui)):
        if not name.endswith(".py") or name == "page.py":
            continue
        tree = _tree("ui", name)
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "file_html" not in imported, f"ui/{name} assembles a page itself: page.render does"
        if name in PAGES:
            classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
            assert any(n.module == "page" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)), name
            assert any(any(f.name == "page" for f in c.body if isinstance(f, ast.FunctionDef)) for c in classes), (
                f"ui/{name} has no page.Reporter"
            )


def test_no_view_imports_another_modules_private_names():
    ui = os.path.join(ROOT, "memscope", "ui")
    bad = []
    for dirpath, _, files in os.walk(ui):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name), os.path.join(ROOT, "memscope"))
                for n in ast.walk(_tree(*rel.split(os.sep))):
                    if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("memscope")):
                        bad += [(rel, n.module, a.name) for a in n.names if a.name.startswith("_")]
    assert bad == []


# -- what ARCHITECTURE.md claims, checked ----------------------------------------------------------------------------

MAX_LINES = 600  # ARCHITECTURE.md / the team's standard: no module over 600 lines


def _modules():
    """(path relative to memscope/, its text) of every module of the package."""
    base = os.path.join(ROOT, "memscope")
    for dirpath, _, files in os.walk(base):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, base).replace(os.sep, "/"), f.read()


def test_no_module_is_over_600_lines():
    long = {rel: text.count("\n") for rel, text in _modules() if text.count("\n") > MAX_LINES}
    assert long == {}


def _imports_lazily(node, in_function=False):
    """Whether ``node`` imports a memscope module or a third-party package inside a function."""
    for child in ast.iter_child_nodes(node):
        if in_function and isinstance(child, ast.Import):
            if any(a.name.split(".")[0] not in sys.stdlib_module_names for a in child.names):
                return True
        elif in_function and isinstance(child, ast.ImportFrom):
            if child.level or (child.module or "").split(".")[0] not in sys.stdlib_module_names:
                return True
        inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if _imports_lazily(child, inside):
            return True
    return False


def _lazy_importers():
    """The modules importing a memscope module or a third-party package inside a function."""
    return {rel for rel, text in _modules() if _imports_lazily(ast.parse(text))}


def _documented_lazy_importers():
    with open(os.path.join(ROOT, "ARCHITECTURE.md"), encoding="utf-8") as f:
        doc = f.read()
    table = doc.split("<!-- lazy-imports")[1].split("<!-- /lazy-imports -->")[0]
    entries = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            entries |= {e.removeprefix("memscope/") for e in first_cell.split("`")[1::2]}
    return entries


def test_the_lazily_importing_modules_are_those_architecture_md_lists():
    found, entries = _lazy_importers(), _documented_lazy_importers()
    assert len(found) > 20  # the check reads the package (37 modules when it was written)

    def covers(entry, rel):
        return rel == entry or (entry.endswith("/") and rel.startswith(entry))

    assert sorted(rel for rel in found if not any(covers(e, rel) for e in entries)) == []  # undocumented
    assert sorted(e for e in entries if not any(covers(e, rel) for rel in found)) == []  # stale


def test_every_probe_attaches_through_when_imported():
    probes = [rel for rel, _ in _modules() if rel.startswith("agent/probes/") and not rel.endswith("__init__.py")]
    assert len(probes) >= 4
    for rel, text in _modules():
        if rel in probes:
            tree = ast.parse(text)
            install = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "install")
            calls = [
                n for n in ast.walk(install) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "when_imported"
            ]
            assert calls, f"{rel}: install() attaches through hooks.when_imported"


# -- types (issue 35): a part of the package is never typed away as Any, and mypy stays strict where it was made so

PACKAGE = Path(__file__).resolve().parent.parent / "memscope"


def _module_trees(root):
    return {p: ast.parse(p.read_text(), str(p)) for p in sorted(root.rglob("*.py"))}


def _any_aliases_of_classes(trees):
    """``Name = Any`` (or ``typing.Any``) where Name is a class of the package: a type given up on."""
    classes = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            value = getattr(node, "value", None)
            is_any = (isinstance(value, ast.Name) and value.id == "Any") or (
                isinstance(value, ast.Attribute) and value.attr == "Any"
            )
            for t in targets:
                if is_any and isinstance(t, ast.Name) and t.id in classes:
                    found.append(f"{path.name}:{node.lineno} {t.id} = Any")
    return found


def test_no_class_of_the_package_is_aliased_to_any():
    assert _any_aliases_of_classes(_module_trees(PACKAGE)) == []


def test_the_any_alias_finder_finds_one(tmp_path):
    (tmp_path / "run.py").write_text("class Run:\n    pass\n")
    (tmp_path / "part.py").write_text("from typing import Any\nRun = Any\nOther = Any\n")
    assert [f.split(" ", 1)[1] for f in _any_aliases_of_classes(_module_trees(tmp_path))] == ["Run = Any"]


def _private_reaches(trees):
    """``x._name`` where x is not ``self`` or ``cls``: one object reaching into another's private state."""
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "os", "sys"))
            ):
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_no_part_of_a_session_reaches_into_another_parts_private_fields():
    # The parts share RunState's public fields (session/state.py); each keeps its own private state to itself.
    assert _private_reaches(_module_trees(PACKAGE / "session")) == []


def test_the_private_reach_finder_finds_one(tmp_path):
    (tmp_path / "finish.py").write_text("def f(run):\n    run._proc.wait()\n    return run.pid\n")
    (tmp_path / "own.py").write_text("class A:\n    def f(self):\n        return self._x\n")
    assert _private_reaches(_module_trees(tmp_path)) == ["finish.py:2 ._proc"]


STRICT = [
    "memscope.model",
    "memscope.errors",
    "memscope.fmt",
    "memscope.outfile",
    "memscope.markers",
    "memscope.wiring",
    "memscope.version",
    "memscope.collect.*",
    "memscope.supervise",
    "memscope.record.*",
    "memscope.store",
    "memscope.analysis.*",
    "memscope.agent.*",
]


# --strict's flags that mypy takes per module (the other three, warn_redundant_casts, warn_unused_ignores and
# check_untyped_defs, are set for the whole package).
STRICT_FLAGS = {
    "disallow_any_generics": True,
    "disallow_subclassing_any": True,
    "disallow_untyped_calls": True,
    "disallow_untyped_defs": True,
    "disallow_incomplete_defs": True,
    "disallow_untyped_decorators": True,
    "warn_return_any": True,
    "implicit_reexport": False,
    "strict_equality": True,
    "extra_checks": True,
}


def test_mypy_checks_the_whole_package_strict_on_layers_0_to_3_and_the_agent():
    tomllib = pytest.importorskip("tomllib")
    conf = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf["files"] == ["memscope"]
    # The rest of the package: checked, bodies of unannotated functions too.
    assert conf["check_untyped_defs"] is conf["warn_unused_ignores"] is conf["warn_redundant_casts"] is True
    strict = set()
    for o in conf.get("overrides", []):
        mods = [o["module"]] if isinstance(o["module"], str) else o["module"]
        # `strict = true` in an override turns strict on for every module (mypy issue #11401): never that.
        assert "strict" not in o, mods
        if all(o.get(k) == v for k, v in STRICT_FLAGS.items()):
            strict.update(mods)
        # No override may loosen a strict module again.
        loosening = {k for k, v in o.items() if k in STRICT_FLAGS and v != STRICT_FLAGS[k]}
        loosening |= {k for k in o if k.startswith(("ignore_errors", "disable_error_code"))}
        assert not (loosening and set(mods) & set(STRICT)), (mods, loosening)
    assert set(STRICT) <= strict
    # .ci/run runs it on the package, as configured.
    ci = [line.split("#")[0].strip() for line in (PACKAGE.parent / ".ci" / "run").read_text().splitlines()]
    assert ci.index("lint-imports") < ci.index("mypy")
    assert "ruff format --check memscope tests benchmarks" in ci
