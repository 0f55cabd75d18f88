# memscope bootstrap. memscope puts this folder first on PYTHONPATH so that EVERY Python process of a watched
# run (wrappers, DataLoader workers, compile workers, ranks) loads the agent. It must never break the run:
# every step is guarded, and it chains the sitecustomize it shadows.
def _memscope_boot() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.get("sitecustomize")
    saved_path = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
        del sys.modules["sitecustomize"]
        try:
            import sitecustomize  # type: ignore[import-not-found]  # noqa: F401  (the one this file shadows, if any)
        except ImportError as exc:
            if exc.name != "sitecustomize":
                sys.stderr.write("memscope: the original sitecustomize failed: %r\n" % (exc,))
        except Exception as exc:
            sys.stderr.write("memscope: the original sitecustomize failed: %r\n" % (exc,))
    finally:
        sys.path[:] = saved_path
        if me is not None:
            sys.modules.setdefault("sitecustomize", me)

    if not os.environ.get("MEMSCOPE_SOCK"):
        return
    try:
        import importlib.util

        pkg = os.path.dirname(here)
        spec = importlib.util.spec_from_file_location(
            "_memscope_agent", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg])
        if spec is None or spec.loader is None:  # never for a .py file: a source loader is always found
            return
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_memscope_agent"] = mod
        spec.loader.exec_module(mod)
        mod.start()
    except Exception:
        pass  # no agent: the run goes on untouched and is still sampled from outside


_memscope_boot()
del _memscope_boot
