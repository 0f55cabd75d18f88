"""Evidence for the exit card, written where it survives the process: per-pid files in the run directory.

faulthandler dumps every thread's Python stack on SIGSEGV/SIGABRT/SIGBUS/SIGFPE/SIGILL; the excepthook saves an
uncaught exception before Python prints it. Both keep working when the collector's socket is gone.
"""
import faulthandler
import json
import os
import sys
import traceback

from .protocol import EXC_PREFIX, FAULT_PREFIX

_fault_file = None


def enable_faulthandler(run_dir):
    global _fault_file
    path = os.path.join(run_dir, "%s%d.txt" % (FAULT_PREFIX, os.getpid()))
    f = open(path, "w")
    faulthandler.enable(file=f, all_threads=True)
    old, _fault_file = _fault_file, f
    if old is not None:
        try:
            old.close()  # the parent's file object, inherited through fork
        except OSError:
            pass


def keep_faulthandler_in_dataloader_workers(run_dir, channel):
    """PyTorch's DataLoader workers install their own SIGSEGV/SIGBUS handlers (which print one line and do not
    chain): re-arm faulthandler after them, so a crashing worker still leaves its Python stack. faulthandler
    calls the previous handler after its dump, so PyTorch's message and the main's error still happen."""
    from .hooks import when_imported

    def patch(mod):
        original = mod._set_worker_signal_handlers

        def set_handlers(*args, **kwargs):
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


def install_excepthook(run_dir, channel):
    previous = sys.excepthook

    def hook(etype, value, tb):
        try:
            rec = {
                "type": getattr(etype, "__qualname__", str(etype)),
                "module": getattr(etype, "__module__", ""),
                "message": str(value)[:10000],
                "traceback": "".join(traceback.format_exception(etype, value, tb))[-100000:],
                "pid": os.getpid(),
            }
            path = os.path.join(run_dir, "%s%d.json" % (EXC_PREFIX, os.getpid()))
            with open(path + ".tmp", "w") as f:
                json.dump(rec, f)
            os.replace(path + ".tmp", path)
            channel.send(dict(rec, t="exception"))
            if "CUDA out of memory" in rec["message"]:
                from .probes.torch_memory import save_at_exception

                save_at_exception(rec["message"])  # unless the allocator's OOM observer saved one already
        except Exception:
            pass
        previous(etype, value, tb)

    sys.excepthook = hook
