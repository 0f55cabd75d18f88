"""memscope: a memory profiler for training runs.

    import memscope
    run = memscope.run(["train.py", "--epochs", "3"])   # starts in the background
    run.wait(); print(run.summary()["exit"]["message"])
"""
from __future__ import annotations

from typing import Any, Sequence

__version__ = "0.1.0"
__all__ = ["run", "attach", "phase", "mark", "Run", "Options", "LaunchError", "__version__"]

from .phases import mark, phase  # noqa: E402  (tiny, stdlib only: safe to import in training code)


def run(command: Sequence[str] | str, **options: Any) -> "Run":
    """Start ``command`` under memscope in the background and return its ``Run``.

    ``command`` is an argv list (``["train.py", "--epochs", "3"]`` or ``["bash", "train.sh"]``) or a string that
    is split like a shell would. Options: record_dir, interval_s, pss_interval_s, grace_s, output ("inherit" or
    "capture"), agent, limit_bytes, summary_json, cwd, env.
    """
    import shlex

    from .runner import Options, Run

    argv = shlex.split(command) if isinstance(command, str) else list(command)
    return Run(argv, options=Options(**options)).start()


def attach(pid: int, **options: Any) -> "Run":
    """Watch a process tree that is already running (sampling only, no agent)."""
    from .runner import Options, Run

    return Run(attach=pid, options=Options(**options)).start()


def __getattr__(name: str) -> Any:
    # Lazy, so that `import memscope` stays cheap in a notebook kernel.
    if name in ("Run", "Options", "LaunchError"):
        from . import runner as _run

        return getattr(_run, name)
    raise AttributeError(name)
