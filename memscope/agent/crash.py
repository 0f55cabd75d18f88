"""Evidence for the exit card, written where it survives the process: per-pid files in the run directory.

faulthandler dumps every thread's Python stack on SIGSEGV/SIGABRT/SIGBUS/SIGFPE/SIGILL; the excepthook saves an
uncaught exception before Python prints it; when the user's own excepthook (rich, loguru, better_exceptions, one
that ends with os._exit) replaced ours, the "sys.excepthook" audit event saves it before that hook runs, and an
exit handler from ``sys.last_value``. All keep working when the collector's socket is
gone.
"""
from __future__ import annotations

import atexit
import faulthandler
import json
import os
import sys
import time

from . import fds
from .protocol import EXC_PREFIX, FAULT_ECHO, FAULT_PREFIX

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any, TextIO

    from .channel import Channel
    from .fds import Ident

_fault_file: tuple[TextIO, int, Ident | None] | None = None  # (file object, fd, identity) faulthandler writes to
_fault_dir: list[str | None] = [None]
_echo: bool | None = None  # the user enabled faulthandler themselves (PYTHONFAULTHANDLER, -X faulthandler)
_saved = [False]  # this process's uncaught exception is saved


def enable_faulthandler(run_dir: str) -> None:
    """Dump every thread's stack to the run's crash file on a fatal signal (and to stderr if the user asked)."""
    global _fault_file, _echo
    _fault_dir[0] = run_dir
    if _echo is None:
        _echo = faulthandler.is_enabled()
    # faulthandler has one file: ours. When the user asked for the dump on stderr, the file's name says so and
    # the collector copies the dump to the run's stderr after the crash.
    path = os.path.join(run_dir, "%s%d%s.txt" % (FAULT_PREFIX, os.getpid(), FAULT_ECHO if _echo else ""))
    # A high, close-on-exec number the program is not handed by its own opens; the file object never closes it
    # (closefd=False): only close_if_own does, once it is sure the number is still this file.
    fd = fds.lift(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666))
    f = open(fd, "w", closefd=False)
    faulthandler.enable(file=f, all_threads=True)
    old, _fault_file = _fault_file, (f, fd, fds.identity(fd))
    if old is not None:
        fds.close_if_own(old[1], old[2])  # the parent's file, inherited through fork, or the one replaced


def check_faulthandler() -> None:
    """faulthandler writes to its descriptor from C, with no check: when the program has closed that number (and
    may have been handed it again), arm faulthandler on a new descriptor of the agent's own."""
    f = _fault_file
    if f is None or fds.owns(f[1], f[2]) or _fault_dir[0] is None:
        return
    try:
        enable_faulthandler(_fault_dir[0])
    except Exception:
        try:
            faulthandler.disable()  # never dump into the program's file
        except Exception:
            pass


def keep_faulthandler_in_dataloader_workers(run_dir: str, channel: Channel) -> None:
    """PyTorch's DataLoader workers install their own SIGSEGV/SIGBUS handlers (which print one line and do not
    chain): re-arm faulthandler after them, so a crashing worker still leaves its Python stack. faulthandler
    calls the previous handler after its dump, so PyTorch's message and the main's error still happen."""
    from .hooks import when_imported

    def patch(mod: Any) -> None:  # torch.utils.data._utils.signal_handling (torch is never imported here)
        original = mod._set_worker_signal_handlers

        def set_handlers(*args: Any, **kwargs: Any) -> Any:
            # enable() does not reinstall handlers while enabled: disable, let PyTorch install its handler,
            # then enable, so that faulthandler dumps first and chains to PyTorch's.
            try:
                faulthandler.disable()
            except Exception:
                pass
            result = original(*args, **kwargs)
            try:
                enable_faulthandler(run_dir)
                # Only DataLoader workers call this: tell the collector before the worker can die unseen.
                channel.send({"t": "role", "role": "dataloader_worker", "pid": os.getpid()})
            except Exception:
                pass
            return result

        mod._set_worker_signal_handlers = set_handlers

    when_imported("torch.utils.data._utils.signal_handling", patch)


def _rank() -> str | None:
    return os.environ.get("RANK")


def save_exception(run_dir: str, channel: Channel, etype: type[BaseException], value: BaseException,
                   tb: TracebackType | None, how: str) -> None:
    """Write this process's uncaught exception where the collector finds it (once per process)."""
    if _saved[0]:
        return
    _saved[0] = True
    rec: dict[str, Any] = {
        "type": getattr(etype, "__qualname__", str(etype)),
        "module": getattr(etype, "__module__", ""),
        "message": str(value)[:10000],
        "traceback": _format(etype, value, tb)[-100000:],
        "pid": os.getpid(),
        "wall": time.time(),
        "rank": _rank(),
        "how": how,
    }
    path = os.path.join(run_dir, "%s%d.json" % (EXC_PREFIX, os.getpid()))
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(rec, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # a run that switched user may not write in memscope's directory: the socket still carries it
    channel.send(dict(rec, t="exception"))
    if "CUDA out of memory" in rec["message"]:
        from .probes.torch_memory import save_at_exception

        save_at_exception(rec["message"])  # unless the allocator's OOM observer saved one already


def _format(etype: type[BaseException], value: BaseException, tb: TracebackType | None) -> str:
    """The exception as Python prints it. traceback (with linecache and tokenize: 16 ms) is imported only here,
    when a process dies of an exception, never at every start."""
    if "traceback" in sys.modules or not issubclass(etype, KeyboardInterrupt):
        import traceback

        return "".join(traceback.format_exception(etype, value, tb))
    # Importing tokenize (namedtuple's exec) inside the excepthook makes CPython forget that the process dies of
    # an uncaught KeyboardInterrupt: it would exit 1 instead of by SIGINT. Frames without source lines then.
    lines = ["Traceback (most recent call last):\n"]
    while tb is not None:
        co = tb.tb_frame.f_code
        lines.append('  File "%s", line %s, in %s\n' % (co.co_filename, tb.tb_lineno, co.co_name))
        tb = tb.tb_next
    text = str(value)
    lines.append("%s%s\n" % (getattr(etype, "__qualname__", str(etype)), ": " + text if text else ""))
    return "".join(lines)


def install_excepthook(run_dir: str, channel: Channel) -> None:
    """Write an uncaught exception to the run's crash file, then let the user's hook run as before."""
    previous = sys.excepthook

    def hook(etype: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        try:
            save_exception(run_dir, channel, etype, value, tb, "excepthook")
        except Exception:
            pass
        previous(etype, value, tb)

    def at_exit() -> None:
        # The interpreter sets sys.last_value (3.12: last_exc) before it calls whatever excepthook is installed,
        # ours or one that replaced it, and runs exit handlers after: the exception is still there.
        value = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if not isinstance(value, BaseException) or isinstance(value, (SystemExit, KeyboardInterrupt)):
            return
        try:
            save_exception(run_dir, channel, type(value), value, value.__traceback__, "at exit")
        except Exception:
            pass

    def audit(event: str, args: tuple[Any, ...]) -> None:
        # The interpreter raises this audit event just before it calls whatever sys.excepthook is then: a hook
        # of the user's that replaced ours and ends the process with os._exit (no exit handlers) still leaves
        # the exception. os.exec*: this image and its agent are about to be replaced (the next image may load
        # no agent: python -I, a cleared environment); the collector must not speak for it with our hello.
        # Compares strings and returns for every other event; never raises (that would abort the operation).
        if event == "sys.excepthook":
            try:
                if args[0] is not hook:
                    save_exception(run_dir, channel, args[1], args[2], args[3], "excepthook (yours)")
            except Exception:
                pass
        elif event == "os.exec":
            try:
                path = args[0] if not isinstance(args[0], int) else "/proc/self/fd/%d" % args[0]  # fexecve
                channel.send_now({"t": "exec", "path": os.fsdecode(path),
                                  "argv": [os.fsdecode(a)[:4096] for a in args[1]][:64]}, timeout=1.0)
            except Exception:
                pass

    sys.excepthook = hook
    atexit.register(at_exit)
    sys.addaudithook(audit)


def after_fork() -> None:
    """In a forked child: crash files of its own pid."""
    _saved[0] = False  # a child's exception is its own
