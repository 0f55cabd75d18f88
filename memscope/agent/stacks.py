"""Stacks on request ("last words"): every thread's Python stack, dumped by faulthandler into the run's directory.

Two routes, the first without any signal: the agent's reader thread, asked over its connection, calls
``faulthandler.dump_traceback`` (``dump_now``); a process asleep in a wait (``signal.pause()``, a lock, I/O) is
not woken by it. Where that thread cannot run (the main thread holds the GIL in a long C call: a numpy
concatenate, a ctypes call) memscope may send the stacks signal, SIGURG: faulthandler's handler is C, walks the
thread states and writes with write(2) without the GIL. SIGURG's default action is to ignore it, so a process
that exec'd away from this agent between memscope's check of its handler and the signal (a fork that execs
/bin/sleep) is not killed by it, as it was by a real-time signal. The dump goes to a per-process file in the run's
private directory; memscope (which outlives an OOM kill) reads it from there.

Safety: the signal is registered only where the program left it at SIG_DFL at start, and never chained.
memscope sends it only to a proven member of the run, running (not asleep), whose /proc/PID/status shows a
handler for it. Nothing runs between captures.
"""
from __future__ import annotations

import faulthandler
import functools
import os
import signal

from . import fds
from .protocol import STACK_PREFIX, STACKS_SIGNAL, STACKS_TAKEN

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
        taken: bool  # the program installed its own handler for the signal
        watching: bool  # signal.signal is wrapped to notice that

_state: _State = {
    "sig": None, "file": None, "fd": None, "ident": None, "dir": None, "taken": False, "watching": False
}


def _signal() -> int | None:
    sig = getattr(signal, STACKS_SIGNAL, None)
    if sig is None or not hasattr(faulthandler, "register"):
        return None  # faulthandler without user signals (Windows)
    sig = int(sig)
    try:
        # Python read each signal's disposition at start: SIG_DFL means neither the program nor a library
        # (through sigaction) has claimed it.
        if signal.getsignal(sig) != signal.SIG_DFL:
            return None
    except (ValueError, OSError):
        return None
    return sig


def install(run_dir: str) -> tuple[int | None, str]:
    """Open ``stack-<pid>.txt`` (appended to: memscope reads from the offset it saw before it asked) and register
    the dump on the stacks signal where the program leaves it free. Returns (signal or None, file name)."""
    sig = _state["sig"] if _state["sig"] is not None else _signal()
    name = "%s%d.txt" % (STACK_PREFIX, os.getpid())
    fd = fds.lift(os.open(os.path.join(run_dir, name),
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o600))
    f = open(fd, "w", closefd=False)
    try:
        if sig is not None and not _state["taken"]:  # a fork of a program that took it keeps the program's
            faulthandler.register(sig, file=f, all_threads=True, chain=False)
            _watch()
    except Exception:
        fds.close_if_own(fd, fds.identity(fd))
        raise
    old = (_state["fd"], _state["ident"])
    _state.update({"sig": sig, "file": f, "fd": fd, "ident": fds.identity(fd), "dir": run_dir, "name": name})
    if old[0] is not None and old[0] != fd:
        fds.close_if_own(old[0], old[1])  # the parent's file, inherited through fork
    if _state["taken"]:
        _mark_taken()
    return sig, name


def _watch() -> None:
    """Notice the program installing its own handler for the stacks signal (it replaces faulthandler's): leave
    the mark memscope checks before it would signal, so that the program's handler is never called by a capture."""
    if _state["watching"]:
        return
    real = signal.signal

    def signal_signal(signalnum: int, handler: object) -> object:
        old = real(signalnum, handler)  # type: ignore[arg-type]
        try:
            if _state["sig"] is not None and int(signalnum) == _state["sig"] and not _state["taken"]:
                _state["taken"] = True
                _mark_taken()
        except Exception:
            pass
        return old

    functools.update_wrapper(signal_signal, real)
    signal.signal = signal_signal  # type: ignore[assignment]
    _state["watching"] = True


def _mark_taken() -> None:
    d = _state["dir"]
    if d is None:
        return
    try:
        os.close(os.open(os.path.join(d, _state["name"] + STACKS_TAKEN),
                         os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600))
    except (OSError, TypeError):
        pass


def info() -> tuple[int | None, str | None]:
    """(signal, file name) of this process's registration, or (None, None)."""
    if _state["fd"] is None:
        return None, None
    return _state["sig"], _state.get("name")


def dump_now() -> bool:
    """Every thread's stack into this process's file, now, from the calling thread (the agent's reader thread, on
    memscope's request): no signal, so no wait of the program's is woken. Returns whether it was written."""
    check()
    f = _state["file"]
    if _state["fd"] is None or f is None:
        return False
    faulthandler.dump_traceback(file=f, all_threads=True)
    return True


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
        if _state["sig"] is not None and not _state["taken"]:  # unregistering would undo the program's handler
            faulthandler.unregister(_state["sig"])
    except Exception:
        pass
    _state.update({"fd": None, "ident": None})
