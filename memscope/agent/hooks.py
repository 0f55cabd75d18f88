"""Run a function right after a module is imported, without importing it ourselves.

Probes must cost nothing until the user's code imports numpy, torch or faiss: a meta-path finder watches for
the names asked for and wraps their loader's exec_module.
"""
import sys
import threading

_waiting = {}   # module name -> [callbacks]
_lock = threading.Lock()


class _Finder:  # a meta path finder needs only find_spec (importlib.abc costs 9 ms to import)
    def find_spec(self, name, path=None, target=None):
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

        def exec_module(module):
            original(module)
            _fire(name, module)

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return spec
        return spec


def _fire(name, module):
    with _lock:
        callbacks = _waiting.pop(name, [])
    for fn in callbacks:
        try:
            fn(module)
        except Exception:
            pass  # a probe must never raise into the user's import


_finder = _Finder()


def when_imported(name, fn):
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
