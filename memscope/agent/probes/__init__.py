"""In-process probes (NumPy loads, FAISS indexes, allocators, ...): each attaches only once the user's code
imports the module it watches (``hooks.when_imported``), and none may raise into user code.

``install(channel)`` installs each probe on its own guarded line, so one probe that fails leaves the others on.
``every(period_s, fn)`` runs light periodic reports on ONE daemon thread per process, started only when a probe
asks for it; the reports also run once more at exit so that a short script's final state is not lost.
"""
from __future__ import annotations

import atexit
import importlib
import os
import threading
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Callable

    from ..channel import Channel

# [period_s, next_due, fn]: a list, next_due updated in place (and read as such by tests/scripts/torch_probe_facts.py)
_tasks: list[list[Any]] = []
_tasks_lock = threading.Lock()
_thread: threading.Thread | None = None
_wake = threading.Event()
_atexit_done = False
TICK_S = 0.5            # the thread's resolution; each task keeps its own period


def _install(name: str, channel: Channel) -> None:
    try:
        importlib.import_module(__name__ + "." + name).install(channel)
    except Exception:
        pass  # a probe that cannot attach leaves the run and the other probes alone


def install(channel: Channel) -> None:
    """Install every probe the registry lists (agent/protocol.PROBES), each on its own guarded line."""
    from ..protocol import PROBES
    for module, _key, _kinds in PROBES:
        _install(module, channel)
    try:
        os.register_at_fork(after_in_child=_after_fork)
        from ..hooks import when_imported
        when_imported("multiprocessing.util", _on_multiprocessing)
    except Exception:
        pass


def every(period_s: float, fn: Callable[[], object]) -> None:
    """Call ``fn()`` about every ``period_s`` seconds on the probes' daemon thread (started on first use)."""
    global _thread
    with _tasks_lock:
        _tasks.append([float(period_s), time.monotonic() + float(period_s), fn])
        if _thread is None:
            _start_thread()


def _start_thread() -> None:
    global _thread
    _thread = threading.Thread(target=_loop, name="memscope-probes", daemon=True)
    _thread.start()
    try:
        atexit.register(_at_exit)
    except Exception:
        pass


def _run_due(force: bool = False) -> None:
    now = time.monotonic()
    with _tasks_lock:
        due = [t for t in _tasks if force or now >= t[1]]
        for t in due:
            t[1] = now + t[0]
    for t in due:
        try:
            t[2]()
        except Exception:
            pass


def _loop() -> None:
    while not _wake.wait(TICK_S):
        _run_due()


def _at_exit() -> None:
    global _atexit_done
    if not _atexit_done:
        _atexit_done = True
        _wake.set()
        _run_due(force=True)


class _Anchor:
    """multiprocessing's after-fork registry holds its objects weakly: this one lives as long as the module."""


_anchor = _Anchor()


def _on_multiprocessing(util: ModuleType) -> None:
    util.register_after_fork(_anchor, _mp_child)


def _mp_child(_obj: object) -> None:
    # A multiprocessing child (a DataLoader worker) leaves by os._exit(): atexit never runs there, but
    # multiprocessing's own exit finalizers do (its registry was just cleared for this child).
    try:
        import multiprocessing.util as util
        util.Finalize(None, _at_exit, exitpriority=100)
    except Exception:
        pass


def _after_fork() -> None:
    # The thread does not survive fork(): a DataLoader worker gets its own, reporting its own heap and loads.
    global _thread, _tasks_lock
    try:
        _tasks_lock = threading.Lock()  # another thread may have held it at fork()
        with _tasks_lock:
            if _thread is not None and _tasks:
                _start_thread()
    except Exception:
        pass
