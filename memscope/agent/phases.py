"""Phases from inside the run: automatic (a top-level nn.Module.train()/.eval() switch, a DataLoader epoch) and
manual (memscope.phase / memscope.mark, which call ``send`` below).

Hooks are installed only once the user's code imports torch; each costs one attribute check per call.

Lightning 2.x enters validation with ``model.eval()`` but restores train mode by setting ``module.training``
directly, which no method call reveals: so the flag of the module last switched at top level is also read once
per batch (in the DataLoader iterator's ``__next__``, in the main process), and a change there is a switch too.
When a loader iterated in eval mode hands out its last batch (or is exhausted), the eval phase ends there ("stop"):
after the last validation no batch may come to reveal the restore, and the run's teardown is no validation.
"""
import os
import threading
import time
import weakref

from .hooks import when_imported

_local = threading.local()
_channel = None
_last_mode = None
_top = None  # weak reference to the module whose train()/eval() was last called at top level
_stopped = None  # the top module's flag when its eval phase was ended by its loader (not a switch to report again)


def send(kind, **data):
    """Send a phase/mark event; a no-op when the collector is not there."""
    ch = _channel
    if ch is None:
        return False
    data.update(t=kind, pid=os.getpid(), wall=time.time())
    return ch.send(data)


def _switch(mode):
    global _last_mode, _stopped
    _stopped = None
    if mode != _last_mode:
        _last_mode = mode
        send("phase", name="train" if mode else "eval", state="switch", auto=True)


def _stop():
    """The automatic phase ends with no successor known yet (the next switch starts one)."""
    global _last_mode, _stopped
    if _last_mode is not None:
        _stopped, _last_mode = _last_mode, None
        send("phase", name="eval", state="stop", auto=True)


def _check_top():
    """The top module's flag, read directly: catches a mode set by attribute (Lightning's restore)."""
    ref = _top
    if ref is not None:
        m = ref()
        if m is not None:
            mode = getattr(m, "training", None)
            # After a loader ended the eval phase the model is still in eval mode until the framework switches
            # it back: only a change of the flag is news then.
            if mode is not None and bool(mode) != _last_mode and bool(mode) != _stopped:
                _switch(bool(mode))


def _patch_module(mod):
    original = mod.Module.train

    def train(self, mode=True):
        global _top
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        try:
            return original(self, mode)
        finally:
            _local.depth = depth
            # Only the outermost call (model.train() / model.eval(), not each submodule), and only on a switch.
            if depth == 0:
                try:
                    if _top is None or _top() is not self:
                        _top = weakref.ref(self)
                except TypeError:
                    pass
                _switch(bool(mode))

    train.__wrapped__ = original
    mod.Module.train = train


def _patch_dataloader(mod):
    original = mod.DataLoader.__iter__
    counts = {}

    def __iter__(self):
        n = counts[id(self)] = counts.get(id(self), 0) + 1
        _check_top()
        send("epoch", loader=id(self), n=n, workers=getattr(self, "num_workers", 0),
             persistent=bool(getattr(self, "persistent_workers", False)), mode=_last_mode)
        return original(self)

    __iter__.__wrapped__ = original
    mod.DataLoader.__iter__ = __iter__
    base = getattr(mod, "_BaseDataLoaderIter", None)
    if base is not None and "__next__" in vars(base):
        original_next = base.__next__

        def __next__(self):
            _check_top()
            try:
                batch = original_next(self)
            except StopIteration:
                if _last_mode is False:  # a loader exhausted in eval mode: that validation is over
                    _stop()
                raise
            if _last_mode is False:
                # Lightning knows the length and never asks past the last batch: the last one handed out in eval
                # mode ends the validation too (its step still runs: the phase ends one step early at most).
                try:
                    if self._num_yielded >= len(self):
                        _stop()
                except Exception:  # an IterableDataset without a length
                    pass
            return batch

        __next__.__wrapped__ = original_next
        base.__next__ = __next__


def install(channel):
    """Watch the frameworks' loops (epochs, train/eval switches) once their modules are imported."""
    global _channel
    _channel = channel
    when_imported("torch.nn.modules.module", _patch_module)
    when_imported("torch.utils.data.dataloader", _patch_dataloader)


def after_fork():
    """In a forked child: forget the parent's phase state."""
    global _last_mode, _top, _stopped
    _last_mode = None  # a forked worker never reports its parent's switches as its own
    _top = _stopped = None
