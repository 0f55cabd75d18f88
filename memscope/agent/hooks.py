"""Run a function right after a module is imported, without importing it ourselves.

Probes must cost nothing until the user's code imports numpy, torch or faiss: a meta-path finder watches for
the names asked for and wraps their loader's exec_module.
"""
from __future__ import annotations

import sys
import threading

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Callable, Sequence

    OnImport = Callable[[ModuleType], object]

_waiting: dict[str, list[OnImport]] = {}   # module name -> [callbacks]
_lock = threading.Lock()


class _Finder:  # a meta path finder needs only find_spec (importlib.abc costs 9 ms to import)
    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _fire(name, module)

        try:
            loader.exec_module = exec_module  # type: ignore[method-assign]  # this loader only, for this import
        except (AttributeError, TypeError):
            return spec
        return spec


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        callbacks = _waiting.pop(name, [])
    for fn in callbacks:
        try:
            fn(module)
        except Exception:
            pass  # a probe must never raise into the user's import


_finder = _Finder()


def when_imported(name: str, fn: OnImport) -> None:
    """Call fn(module) once ``name`` is imported (now, if it already is)."""
    mod = sys.modules.get(name)
    if mod is not None:
        try:
            fn(mod)
        except Exception:
            pass
        return
    with _lock:
        _waiting.setdefault(name, []).append(fn)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
