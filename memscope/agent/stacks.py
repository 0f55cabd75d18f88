"""Stacks on request ("last words"): every thread's Python stack, dumped by faulthandler on a real-time signal.

faulthandler's handler is C: it walks the thread states and writes with write(2), without the GIL, so it answers
while the main thread sits in a long C call that holds the GIL (a numpy concatenate, a ctypes call), where a
Python-level handler would wait for that call to end. The dump goes to a per-process file in the run's private
directory; memscope (which outlives an OOM kill) reads it from there.

Safety: the signal is one the program does not use (its disposition is SIG_DFL at start, else no handler is
registered), and never chained: chaining to SIG_DFL would re-raise a real-time signal, which kills. memscope sends
it only to a proven member of the run whose /proc/PID/status shows a handler for it (exec resets handlers, so a
process that exec'd away from this agent is never signalled). Nothing runs between captures.
"""
from __future__ import annotations

import faulthandler
import os
import signal

from . import fds
from .protocol import STACK_PREFIX, STACKS_SIGNAL_OFFSET

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Optional, TextIO, TypedDict

    from .fds import Ident

    class _State(TypedDict, total=False):
        sig: Optional[int]  # the stacks signal, once found free
        file: Optional[TextIO]  # faulthandler's file object on ``fd`` (it never closes it)
        fd: Optional[int]
        ident: Optional[Ident]
        dir: Optional[str]  # the run's directory
        name: str  # the file's name in it

_state: _State = {"sig": None, "file": None, "fd": None, "ident": None, "dir": None}


def _signal() -> int | None:
    rtmin = getattr(signal, "SIGRTMIN", None)
    if rtmin is None or not hasattr(faulthandler, "register"):
        return None  # no real-time signals (macOS), or faulthandler without user signals (Windows)
    sig = int(rtmin) + STACKS_SIGNAL_OFFSET
    if sig > int(signal.SIGRTMAX):
        return None
    try:
        # Python read each signal's disposition at start: SIG_DFL means neither the program nor a library
        # (through sigaction) has claimed it.
        if signal.getsignal(sig) != signal.SIG_DFL:
            return None
    except (ValueError, OSError):
        return None
    return sig


def install(run_dir: str) -> tuple[int, str] | None:
    """Register the dump on the stacks signal, into ``stack-<pid>.txt`` (appended to: memscope reads from the
    offset it saw before it signalled). Returns (signal, file name) for the hello, or None."""
    sig = _state["sig"] if _state["sig"] is not None else _signal()
    if sig is None:
        return None
    name = "%s%d.txt" % (STACK_PREFIX, os.getpid())
    fd = fds.lift(os.open(os.path.join(run_dir, name),
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600))
    f = open(fd, "w", closefd=False)
    try:
        faulthandler.register(sig, file=f, all_threads=True, chain=False)
    except Exception:
        fds.close_if_own(fd, fds.identity(fd))
        raise
    old = (_state["fd"], _state["ident"])
    _state.update({"sig": sig, "file": f, "fd": fd, "ident": fds.identity(fd), "dir": run_dir, "name": name})
    if old[0] is not None and old[0] != fd:
        fds.close_if_own(old[0], old[1])  # the parent's file, inherited through fork
    return sig, name


def info() -> tuple[int | None, str | None]:
    """(signal, file name) of this process's registration, or (None, None)."""
    if _state["fd"] is None:
        return None, None
    return _state["sig"], _state.get("name")


def after_fork() -> None:
    """A forked child inherits the handler and the parent's file: give it a file of its own (its own pid)."""
    if _state["dir"] is None:
        return
    try:
        install(_state["dir"])
    except Exception:
        unregister()


def check() -> None:
    """The program closed our descriptor (and may have been handed its number): re-register on a new one, or
    unregister, so that a dump never lands in the program's file."""
    if _state["fd"] is None or fds.owns(_state["fd"], _state["ident"]):
        return
    run_dir = _state["dir"]  # set with the descriptor
    try:
        if run_dir is None:
            raise ValueError("no run directory")
        install(run_dir)
    except Exception:
        unregister()


def unregister() -> None:
    try:
        if _state["sig"] is not None:
            faulthandler.unregister(_state["sig"])
    except Exception:
        pass
    _state.update({"fd": None, "ident": None})
