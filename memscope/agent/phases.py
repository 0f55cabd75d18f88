"""Phases from inside the run: automatic (a top-level nn.Module.train()/.eval() switch, a DataLoader epoch) and
manual (memscope.phase / memscope.mark, which call ``send`` below).

Hooks are installed only once the user's code imports torch; each costs one attribute check per call.
"""
import os
import threading
import time

from .hooks import when_imported

_local = threading.local()
_channel = None
_last_mode = None


def send(kind, **data):
    """Send a phase/mark event; a no-op when the collector is not there."""
    ch = _channel
    if ch is None:
        return False
    data.update(t=kind, pid=os.getpid(), wall=time.time())
    return ch.send(data)


def _patch_module(mod):
    original = mod.Module.train

    def train(self, mode=True):
        global _last_mode
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        try:
            return original(self, mode)
        finally:
            _local.depth = depth
            # Only the outermost call (model.train() / model.eval(), not each submodule), and only on a switch.
            if depth == 0 and bool(mode) != _last_mode:
                _last_mode = bool(mode)
                send("phase", name="train" if mode else "eval", state="switch", auto=True)

    train.__wrapped__ = original
    mod.Module.train = train


def _patch_dataloader(mod):
    original = mod.DataLoader.__iter__
    counts = {}

    def __iter__(self):
        n = counts[id(self)] = counts.get(id(self), 0) + 1
        send("epoch", loader=id(self), n=n, workers=getattr(self, "num_workers", 0))
        return original(self)

    __iter__.__wrapped__ = original
    mod.DataLoader.__iter__ = __iter__


def install(channel):
    global _channel
    _channel = channel
    when_imported("torch.nn.modules.module", _patch_module)
    when_imported("torch.utils.data.dataloader", _patch_dataloader)


def after_fork():
    global _last_mode
    _last_mode = None  # a forked worker never reports its parent's switches as its own
