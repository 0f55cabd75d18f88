"""Under ``memscope run --scalene``: keep the exit evidence right and the on/off signals harmless.

Scalene runs the user's script with ``exec`` inside its own try/except, so an uncaught exception never reaches
``sys.excepthook`` (the agent's evidence) and Scalene prints it itself. Shadowing ``exec`` in Scalene's module
hands the exception to ``sys.excepthook`` as plain Python would (one traceback, exit status 1), and tells the
collector which process runs the script once Scalene is ready to take its on/off signals (and which signals they
are). After each profile Scalene writes, the collector is told, with the CPU total its percentages are of.

Scalene forwards its on/off signals (SIGILL/SIGBUS) to every child it forked; in a DataLoader worker, PyTorch's
SIGBUS handler takes the "off" for a bus error and kills the worker (measured: the training then fails with
"DataLoader worker ... is killed by signal: Bus error"). Workers are not profiled in a window anyway (their
profile is merged only when they exit), so they are left out of the forwarding.
"""
from __future__ import annotations

import builtins
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any

    from .channel import Channel


def install(channel: Channel) -> None:
    """Tell memscope Scalene's on/off signals and profiled pid once Scalene is ready in this process."""
    from .hooks import when_imported

    when_imported("scalene.scalene_profiler", lambda mod: _patch_profiler(mod, channel))
    when_imported("scalene.scalene_signal_manager", _patch_signal_manager)


def _patch_profiler(mod: Any, channel: Channel) -> None:  # mod: scalene.scalene_profiler (untyped)
    real_exec = builtins.exec
    scalene_cls = mod.Scalene

    def _exec(code: Any, *args: Any) -> None:
        try:
            from scalene.scalene_signals import ScaleneSignals  # already loaded in this process

            on, off = ScaleneSignals().get_lifecycle_signals()
            channel.send({"t": "scalene", "state": "ready", "pid": os.getpid(), "on": int(on), "off": int(off)})
        except Exception:
            pass
        try:
            return real_exec(code, *args)
        except Exception as exc:
            tb = exc.__traceback__
            if tb is not None and tb.tb_frame.f_code is _exec.__code__:
                tb = tb.tb_next  # this shim is not part of the user's traceback
            sys.excepthook(type(exc), exc, tb)
            raise SystemExit(1) from None  # Scalene still writes its profile, and exits 1

    mod.exec = _exec  # a module global shadows the builtin for Scalene's own calls only

    original_output = scalene_cls.output_profile

    def output_profile(*args: Any, **kwargs: Any) -> Any:
        result = original_output(*args, **kwargs)
        try:
            # Its JSON holds percentages of this total: with it, the collector turns them into seconds.
            stats = getattr(scalene_cls, "_Scalene__stats", None)
            total = float(stats.cpu_stats.total_cpu_samples) if stats is not None else None
        except Exception:
            total = None
        try:
            channel.send({"t": "scalene", "state": "written", "pid": os.getpid(), "total_cpu_s": total})
        except Exception:
            pass
        return result

    scalene_cls.output_profile = staticmethod(output_profile)


def _is_dataloader_worker(pid: int) -> bool:
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip() == "pt_data_worker"
    except OSError:
        return False


def _patch_signal_manager(mod: Any) -> None:  # scalene.scalene_signal_manager (untyped)
    cls = mod.ScaleneSignalManager
    for name in ("send_lifecycle_start_to_child", "send_lifecycle_stop_to_child"):
        original = getattr(cls, name, None)
        if original is None:
            continue

        def send(self: Any, pid: int, _original: Any = original) -> Any:
            if _is_dataloader_worker(pid):
                return None
            return _original(self, pid)

        setattr(cls, name, send)
