"""The house (ARCHITECTURE.md): imports go one way, and types are not given up to keep them so. `lint-imports`
checks the layers in CI; this checks what a layers contract cannot see, a circle inside one layer
(session/run <-> session/launch, say), counting lazy and type-only imports too, as grimp reads them; a class of
the package aliased to ``Any``; a part of a session reaching into another's private fields; and that mypy's
configuration keeps its strictness."""

import ast
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


# -- types (issue 35): a part of the package is never typed away as Any, and mypy stays strict where it was made so

PACKAGE = Path(__file__).resolve().parent.parent / "memscope"


def _modules(root):
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
    assert _any_aliases_of_classes(_modules(PACKAGE)) == []


def test_the_any_alias_finder_finds_one(tmp_path):
    (tmp_path / "run.py").write_text("class Run:\n    pass\n")
    (tmp_path / "part.py").write_text("from typing import Any\nRun = Any\nOther = Any\n")
    assert [f.split(" ", 1)[1] for f in _any_aliases_of_classes(_modules(tmp_path))] == ["Run = Any"]


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
    assert _private_reaches(_modules(PACKAGE / "session")) == []


def test_the_private_reach_finder_finds_one(tmp_path):
    (tmp_path / "finish.py").write_text("def f(run):\n    run._proc.wait()\n    return run.pid\n")
    (tmp_path / "own.py").write_text("class A:\n    def f(self):\n        return self._x\n")
    assert _private_reaches(_modules(tmp_path)) == ["finish.py:2 ._proc"]


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
