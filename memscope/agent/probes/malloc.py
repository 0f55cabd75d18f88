"""glibc's heap: ``mallinfo2()`` through ctypes, every 2 s (and at exit), sent as ``malloc`` messages.

in use = uordblks (small chunks in use) + hblkhd (mmapped chunks); free but held = fordblks (free chunks that
glibc keeps in its arenas instead of returning them to the kernel); releasable = keepcost (what malloc_trim(0)
could give back from the top of the main arena at least). Only on glibc >= 2.33 (mallinfo2); elsewhere silent.

It attaches when the user's code imports numpy or torch (a process with nothing but the standard library is not
where memory questions are). A report is sent only when a figure moved by >= 1 MiB, or every 30 s.
"""
from __future__ import annotations

import os

from . import every

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Callable

    from ..channel import Channel

PERIOD_S = 2.0
MIN_CHANGE = 1 << 20
HEARTBEAT_S = 30.0

_channel: Channel | None = None
_fn: Callable[[], Any] | None = None  # libc's mallinfo2, returning a Mallinfo2 structure (made in _load)
DUTY = 0.002                 # the most of the time the arena locks may be held by these reads
_last: list[Any] = [None, 0.0]  # [the figures last sent (dict) or None, when (monotonic)]
_next_at = [0.0]
_started = [False]


def _load() -> Callable[[], Any] | None:
    import ctypes
    import ctypes.util

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    # glibc >= 2.33 only; musl and macOS have none
    fn: ctypes._NamedFuncPointer | None = getattr(libc, "mallinfo2", None)
    if fn is None:
        return None
    fn.restype = Mallinfo2
    fn.argtypes = []
    return fn


def read() -> dict[str, int] | None:
    """The heap's figures in bytes, or None where mallinfo2 is not there."""
    fn = _fn
    if fn is None:
        return None
    m = fn()
    return {"arena_bytes": m.arena, "mmap_bytes": m.hblkhd, "in_use_bytes": m.uordblks + m.hblkhd,
            "free_held_bytes": m.fordblks, "releasable_bytes": m.keepcost, "free_chunks": m.ordblks}


def _report() -> None:
    import time
    now = time.monotonic()
    if now < _next_at[0]:
        return
    t0 = time.perf_counter()
    cur = read()
    if cur is None:
        return
    # mallinfo2 walks every free chunk under the arena locks (12 ms for 500k free chunks here): it must not
    # hold the training's malloc() for more than DUTY of the time, so a slow read spaces out the next ones.
    _next_at[0] = now + (time.perf_counter() - t0) / DUTY
    last = _last[0]
    moved = last is None or any(abs(cur[k] - last[k]) >= MIN_CHANGE
                                for k in ("in_use_bytes", "free_held_bytes", "mmap_bytes"))
    if not moved and now - _last[1] < HEARTBEAT_S:
        return
    _last[0], _last[1] = cur, now
    ch = _channel
    if ch is not None:
        ch.send(dict(cur, t="malloc", pid=os.getpid()))


def _start(_module: object = None) -> None:
    global _fn
    if _started[0]:
        return
    _started[0] = True
    _fn = _load()
    if _fn is not None:
        every(PERIOD_S, _report)
        os.register_at_fork(after_in_child=_after_fork)


def _after_fork() -> None:
    _last[0] = None  # a forked worker has its own heap: its first figures go out at once


def install(channel: Channel) -> None:
    """Report glibc's heap (mallinfo2) periodically on the probes' thread."""
    global _channel
    if not os.path.exists("/proc/self"):  # glibc is a Linux matter; stay silent elsewhere
        return
    _channel = channel
    from ..hooks import when_imported
    when_imported("numpy", _start)
    when_imported("torch", _start)
