"""Phases from inside the run: automatic (a top-level nn.Module.train()/.eval() switch, a DataLoader epoch) and
manual (memscope.phase / memscope.mark, which call ``send`` below).

Hooks are installed only once the user's code imports torch; each costs one attribute check per call.

Lightning 2.x enters validation with ``model.eval()`` but restores train mode by setting ``module.training``
directly, which no method call reveals: so the flag of the module last switched at top level is also read once
per batch (in the DataLoader iterator's ``__next__``, in the main process), and a change there is a switch too.
When a loader iterated in eval mode hands out its last batch (or is exhausted), the eval phase ends there ("stop"):
after the last validation no batch may come to reveal the restore, and the run's teardown is no validation.

The user's phases and marks are coalesced and rate-limited here, in the process, where they cost: a manual phase
that starts again right after it ended (``with memscope.phase("step")`` around every step) is the same stretch, so
its end is held back and a start of the same name within ``COALESCE_S`` cancels it (nothing sent, counted);
beyond ``RATE`` messages a second (after a burst of ``BURST``) a phase's start and its end, or a mark, are not
sent (counted). Marks are cut to ``MARK_CHARS`` characters. The counts ride on the next message and a ``limits``
message at exit.
"""
from __future__ import annotations

import os
import threading
import time
import weakref

from .hooks import when_imported
from .protocol import MARK_CHARS, NAME_CHARS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any

    from .channel import Channel

COALESCE_S = 0.05  # a manual phase started again within this of its end continues (no end/start sent)
RATE = 100.0  # manual phase and mark messages sent a second, sustained
BURST = 300.0  # ... and at once, after a quiet stretch (more would fill the socket before the collector reads)
FLUSH_S = 0.5  # a held-back end is sent at most about this late (by the agent's reader thread)

_local = threading.local()
_channel: Channel | None = None
_lock = threading.Lock()
# (name, monotonic time): a manual phase's end, held back in case the same phase starts again
_held: tuple[str, float] | None = None
_skipped: dict[str, int] = {}  # name -> starts not sent (over the rate): their ends are not sent either
_tokens = BURST
_refill = 0.0
coalesced = 0  # manual phase end/start pairs not sent: the phase went on
dropped = 0  # manual phase starts (with their ends) and marks not sent: over the rate
_reported = (0, 0)  # the counts last sent
_last_mode: bool | None = None
_top: weakref.ref[Any] | None = None  # weak reference to the module whose train()/eval() was last called at top level
# The top module's flag when its eval phase was ended by its loader (not a switch to report again).
_stopped: bool | None = None


def send(kind: str, **data: Any) -> bool:
    """Send a phase/mark event; a no-op when the collector is not there."""
    ch = _channel
    if ch is None:
        return False
    data.update(t=kind, pid=os.getpid(), wall=time.time())
    return ch.send(data)


def _send_at_exit(kind: str, **data: Any) -> bool:
    # At exit the socket may still be full of what the process just sent: wait a little for room (the process
    # is ending; nothing of the training waits), so that the last end and the counts are not lost.
    ch = _channel
    if ch is None:
        return False
    data.update(t=kind, pid=os.getpid(), wall=time.time())
    return ch.send_now(data, timeout=0.5)


def phase_start(name: str) -> bool:
    """``memscope.phase(name)`` entered. The hot path (a step's phase, again): no message, a lock and a clock."""
    global _held, coalesced
    held = _held
    if held is not None and held[0] == name:
        now = time.monotonic()
        with _lock:
            if _held is held and now - held[1] < COALESCE_S:
                _held = None
                coalesced += 1
                return True
    return manual("phase", name, "start")


def phase_end(name: str) -> bool:
    """``memscope.phase(name)`` left: the end is held back (``flush`` or the next message sends it)."""
    global _held
    with _lock:
        if _held is None and not _skipped.get(name):
            _held = (name, time.monotonic())
            return True
    return manual("phase", name, "end")


def manual(kind: str, name: object = None, state: str | None = None, text: object = None) -> bool:
    """memscope.phase / memscope.mark (markers.py): coalesced, rate-limited, then sent. Never raises."""
    global _held, coalesced, dropped
    now = time.monotonic()
    with _lock:
        if kind == "phase":
            name = str(name)
            held = _held
            if state == "start" and held is not None and held[0] == name and now - held[1] < COALESCE_S:
                _held = None
                coalesced += 1
                return True
            _flush(now)
            if state == "end":
                if _skipped.get(name):
                    _skipped[name] -= 1  # its start was not sent
                    return False
                _held = (name, now)
                return True
            if not _take(now):
                _skipped[name] = _skipped.get(name, 0) + 1
                dropped += 1
                return False
            return _send_counted("phase", name=name[:NAME_CHARS], state=state)
        _flush(now)
        if not _take(now):
            dropped += 1
            return False
        text = str(text)
        if len(text) > MARK_CHARS:
            text = text[:MARK_CHARS] + " [memscope: cut; %d more characters]" % (len(text) - MARK_CHARS)
        return _send_counted("mark", text=text)


def _take(now: float) -> bool:
    """One message's worth of the rate (a token bucket: RATE a second, BURST at most)."""
    global _tokens, _refill
    _tokens = min(BURST, _tokens + (now - _refill) * RATE)
    _refill = now
    if _tokens < 1.0:
        return False
    _tokens -= 1.0
    return True


def _send_counted(kind: str, final: bool = False, **data: Any) -> bool:
    global _reported
    counts = (coalesced, dropped)
    if counts != _reported:
        data.update(coalesced=counts[0], dropped=counts[1])
        _reported = counts
    return (_send_at_exit if final else send)(kind, **data)


def _flush(now: float, final: bool = False) -> None:
    """Send the held-back end (with how long ago it happened, so that it is dated right). Under ``_lock``."""
    global _held
    held = _held
    if held is not None:
        _held = None
        _send_counted("phase", final, name=str(held[0])[:NAME_CHARS], state="end",
                      ago=round(max(0.0, now - held[1]), 6))


def flush(final: bool = False) -> None:
    """The agent's reader thread (every FLUSH_S) and exit: send an end held back longer than COALESCE_S, and at
    exit the counts if they changed since they were last sent."""
    global _reported
    try:
        now = time.monotonic()
        with _lock:
            held = _held
            if held is not None and (final or now - held[1] >= COALESCE_S):
                _flush(now, final)
            counts = (coalesced, dropped)
            if final and counts != _reported:
                _reported = counts
                _send_at_exit("limits", coalesced=counts[0], dropped=counts[1])
    except Exception:
        pass


def _switch(mode: bool) -> None:
    global _last_mode, _stopped
    _stopped = None
    if mode != _last_mode:
        _last_mode = mode
        send("phase", name="train" if mode else "eval", state="switch", auto=True)


def _stop() -> None:
    """The automatic phase ends with no successor known yet (the next switch starts one)."""
    global _last_mode, _stopped
    if _last_mode is not None:
        _stopped, _last_mode = _last_mode, None
        send("phase", name="eval", state="stop", auto=True)


def _check_top() -> None:
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


def _patch_module(mod: Any) -> None:  # torch.nn.modules.module (torch is never imported here)
    original = mod.Module.train

    def train(self: Any, mode: bool = True) -> Any:
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

    train.__wrapped__ = original  # type: ignore[attr-defined]
    mod.Module.train = train


def _patch_dataloader(mod: Any) -> None:  # torch.utils.data.dataloader
    original = mod.DataLoader.__iter__
    counts: dict[int, int] = {}

    def __iter__(self: Any) -> Any:
        n = counts[id(self)] = counts.get(id(self), 0) + 1
        _check_top()
        send("epoch", loader=id(self), n=n, workers=getattr(self, "num_workers", 0),
             persistent=bool(getattr(self, "persistent_workers", False)), mode=_last_mode)
        return original(self)

    __iter__.__wrapped__ = original  # type: ignore[attr-defined]
    mod.DataLoader.__iter__ = __iter__
    base = getattr(mod, "_BaseDataLoaderIter", None)
    if base is not None and "__next__" in vars(base):
        original_next = base.__next__

        def __next__(self: Any) -> Any:
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

        __next__.__wrapped__ = original_next  # type: ignore[attr-defined]
        base.__next__ = __next__


def install(channel: Channel) -> None:
    """Watch the frameworks' loops (epochs, train/eval switches) once their modules are imported."""
    global _channel
    import atexit

    _channel = channel
    atexit.register(flush, True)
    when_imported("torch.nn.modules.module", _patch_module)
    when_imported("torch.utils.data.dataloader", _patch_dataloader)


def after_fork() -> None:
    """In a forked child: forget the parent's phase state."""
    global _last_mode, _top, _stopped, _lock, _held, _skipped, coalesced, dropped, _reported
    _last_mode = None  # a forked worker never reports its parent's switches as its own
    _top = _stopped = None
    _lock = threading.Lock()  # the parent's may have been held by another thread at the fork
    _held, _skipped, coalesced, dropped, _reported = None, {}, 0, 0, (0, 0)
