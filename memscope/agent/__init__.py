"""The memscope agent: runs inside every Python process of a watched run.

Loaded by ``site/sitecustomize.py`` under the private name ``_memscope_agent`` (so it works in any interpreter,
even one where memscope is not installed). It imports only the standard library at start, never raises into
user code, and keeps the training untouched if the collector goes away.
"""
from __future__ import annotations

import os
import sys

from . import crash, phases, stacks
from .channel import Channel
from .protocol import ENV_DIR, ENV_SCRIPT, ENV_SOCK, ENV_TOKEN

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any

channel: Channel | None = None
_forked = False


def _hello() -> dict[str, Any]:
    script = os.environ.get(ENV_SCRIPT)
    argv0 = sys.argv[0] if sys.argv else ""
    runs_script = bool(script and not _forked and argv0 and os.path.realpath(argv0) == os.path.realpath(script))
    sig, stack_file = stacks.info()
    return {"pid": os.getpid(), "ppid": os.getppid(), "argv": list(sys.argv),
            "orig_argv": list(getattr(sys, "orig_argv", [])), "executable": sys.executable,
            "runs_script": runs_script, "forked": _forked, "rank": os.environ.get("RANK"),
            "stacks_signal": sig, "stacks_file": stack_file}


def _after_fork() -> None:
    global _forked
    try:
        _forked = True
        stacks.after_fork()  # first: the parent's file must never be named in this child's hello
        crash.after_fork()
        crash.enable_faulthandler(os.environ[ENV_DIR])
        phases.after_fork()
        if channel is not None:  # registered by start() once the channel is made
            channel.after_fork(_hello())
    except Exception:
        pass
    _serve_in_thread(idle=False)  # the parent's reader thread did not come through the fork: stacks are asked of it


def _check_fds() -> None:
    crash.check_faulthandler()
    stacks.check()


def _serve(idle: bool = True) -> None:
    """The agent's reader thread: answers the collector's requests (a tensor census, stacks) one at a time.
    ``idle``: it also sends the phases' held-back end (the main's); a forked child's thread only waits for
    requests, never waking otherwise (a launcher may have a hundred such children)."""
    ch = channel  # start() made it before it started this thread
    if ch is None:
        return
    reqs = ch.requests(idle=phases.flush, idle_s=phases.FLUSH_S) if idle else ch.requests(idle=None, idle_s=3600.0)
    for req in reqs:
        kind = req.get("t")
        if kind == "stacks":  # into the file memscope reads: no reply, and no signal to wake anything
            try:
                stacks.dump_now()
            except Exception:
                pass
            continue
        try:
            if kind == "census":
                from . import census

                reply: dict[str, Any] = dict(census.take(), t="census", id=req.get("id"))
            else:
                reply = {"t": "reply", "id": req.get("id"), "error": "unknown request %r" % (kind,)}
        except Exception as exc:  # the census failed: say so, never raise into the process
            reply = {"t": kind or "reply", "id": req.get("id"), "error": repr(exc)}
        ch.send_now(reply)


def _serve_in_thread(idle: bool = True) -> None:
    try:
        import threading

        threading.Thread(target=_serve, args=(idle,), name="memscope-agent", daemon=True).start()
    except Exception:
        pass


def start() -> None:
    """Start the agent in this process (the sitecustomize calls it): connect, say hello, install the probes."""
    global channel
    sock, token, run_dir = os.environ.get(ENV_SOCK), os.environ.get(ENV_TOKEN), os.environ.get(ENV_DIR)
    if not (sock and token and run_dir):
        return
    channel = Channel(sock, token)
    channel.on_lost = _check_fds  # the program took our socket's number: it may have the others
    channel.on_use = _check_fds  # and at every message: faulthandler's (or the stacks file's) number alone may be taken
    try:
        crash.enable_faulthandler(run_dir)
    except Exception:
        pass
    try:
        stacks.install(run_dir)  # stacks on request: memscope signals only where this handler shows
    except Exception:
        pass
    try:
        crash.keep_faulthandler_in_dataloader_workers(run_dir, channel)
    except Exception:
        pass
    try:
        crash.install_excepthook(run_dir, channel)
    except Exception:
        pass
    try:
        from . import scalene_probe
        scalene_probe.install(channel)  # attaches only if Scalene is imported (memscope run --scalene)
    except Exception:
        pass
    channel.connect(_hello())
    _serve_in_thread()
    try:
        phases.install(channel)
    except Exception:
        pass
    try:
        from . import probes
        probes.install(channel)  # NumPy, FAISS, allocators: each attaches when its module is imported
    except Exception:
        pass
    os.register_at_fork(after_in_child=_after_fork)
