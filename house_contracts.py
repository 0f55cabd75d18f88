"""import-linter's contract type `stdlib_only`: a module imports the standard library and an allow-list, nothing else.

The built-in `forbidden` contract is a deny-list: a package nobody thought to name (pynvml, pandas) passes it. This
one is an allow-list: any import outside `sys.stdlib_module_names` and `allowed_modules` breaks it. With
`lazy_imports_allowed`, an import inside a function body or under `if TYPE_CHECKING:` is let through (the agent's
probes import numpy only once the user's program has it; a type-only import never runs); a top-level one, which
runs when the module loads, is not.

`lint-imports` finds this file because it puts the current directory on `sys.path` (run it from the repository root);
pyproject.toml names it under `contract_types`.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from typing import TYPE_CHECKING, TypeAlias, cast

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck
from importlinter.domain.imports import Module

if TYPE_CHECKING:
    from grimp import DetailedImport  # a TypedDict: for the type checker only (older grimp do not export it)

# (importer, imported, grimp's details of each import statement: line_number, line_contents)
_Violation: TypeAlias = "tuple[str, str, list[DetailedImport]]"


def _source_path(module: str) -> str | None:
    """The file of an internal module, found from its root package's folder (nothing is imported)."""
    root, *rest = module.split(".")
    spec = importlib.util.find_spec(root)
    if spec is None or not spec.submodule_search_locations:
        return None
    base = os.path.join(list(spec.submodule_search_locations)[0], *rest)
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _type_checking_only(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): its body never runs, only a type checker reads it."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_import_lines(path: str) -> set[int]:
    """Line numbers of the import statements that run when the module loads (not inside a function, not under
    ``if TYPE_CHECKING:``)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    lines: set[int] = set()
    todo: list[ast.AST] = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue  # its body runs when called, not when the module loads
        if isinstance(node, ast.If) and _type_checking_only(node):
            todo.extend(node.orelse)  # only the else branch runs
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lines.add(node.lineno)
        todo.extend(ast.iter_child_nodes(node))
    return lines


class StdlibOnlyContract(Contract):
    """The source modules (and their descendants) import only the standard library and `allowed_modules`.

    Configuration options:
        - source_modules: the modules checked, each with its descendants.
        - allowed_modules: internal modules they may import besides the standard library (each with descendants).
        - lazy_imports_allowed: whether an import inside a function body is exempt (default false).
    """

    type_name = "stdlib_only"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.ModuleField(), required=False)
    lazy_imports_allowed = fields.BooleanField(required=False, default=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = [m.name for m in cast("list[Module]", self.source_modules)]
        allowed = [m.name for m in cast("list[Module] | None", self.allowed_modules) or []]
        lazy_ok = bool(self.lazy_imports_allowed)
        checked: set[str] = set()
        for source in sources:
            if source not in graph.modules:
                raise ValueError(f"Module '{source}' does not exist.")
            checked |= {source} | graph.find_descendants(source)
        violations: list[_Violation] = []
        for importer in sorted(checked):
            top_lines: set[int] | None = None
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if imported.split(".")[0] in sys.stdlib_module_names:
                    continue
                if any(imported == a or imported.startswith(a + ".") for a in allowed):
                    continue
                details = graph.get_import_details(importer=importer, imported=imported)
                if lazy_ok:
                    if top_lines is None:
                        path = _source_path(importer)
                        top_lines = _top_level_import_lines(path) if path else set()
                    details = [d for d in details if d["line_number"] in top_lines]
                    if not details:
                        continue
                violations.append((importer, imported, details))
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, details in cast("list[_Violation]", check.metadata["violations"]):
            output.print_error(f"{importer} is not allowed to import {imported}:", bold=True)
            output.new_line()
            for d in details:
                output.indent_cursor()
                output.print_error(f"{importer}:{d['line_number']}: {d['line_contents']}")
            output.new_line()
