"""PyTorch's memory from inside the process: the CUDA caching allocator (per device), MPS on macOS, CUDA OOMs, and
torch.compile's compilation windows.

- ``torch_alloc`` messages: allocator stats per device, on the probes' thread every SAMPLE_S, and once at exit.
  CUDA sampling is queued on torch.cuda's own lazy-init list (``torch.cuda._lazy_call``), so it starts only when
  the user's code initialises CUDA: memscope itself never creates a CUDA context (that costs GPU memory and breaks
  fork()). On a CPU-only run nothing is ever sampled.
- ``cuda_oom`` messages: sent from the allocator's OOM observer, before the stack unwinds and frees memory: the
  allocation that failed, the device's total and free memory, the allocator's stats and summary, and the path of a
  memory snapshot (``torch.cuda.memory._snapshot()`` with the observer's numbers under ``memscope_oom``, pickled in
  the run directory; the collector keeps it beside the record; ``save_at_exception`` does it from the excepthook
  where PyTorch has no OOM observer). The snapshot's segments show fragmentation vs a real shortage. Allocation history (the trace, and the frames of each block) costs host memory and time on
  every allocation, so it is recorded only when asked: ``--cuda-history`` (env MEMSCOPE_CUDA_HISTORY = the number
  of entries kept, a ring).
- ``compile`` messages: the start and end of each outermost Dynamo compilation (torch._dynamo's callback handler),
  with inductor's compile_threads, so the collector can tell whether the compile-worker pool outlived compilation.
"""
from __future__ import annotations

import os
import sys
import time

from ..hooks import when_imported

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Mapping

    from ..channel import Channel

SAMPLE_S = 2.0
HISTORY_ENV = "MEMSCOPE_CUDA_HISTORY"   # entries of allocation history to keep; unset or 0: none recorded
MAX_SNAPSHOTS = 2            # per process: a loop that catches OOMs and retries must not fill the disk
_STAT_KEYS = {               # memory_stats key -> message field (keys documented in torch.cuda.memory_stats)
    "allocated_bytes.all.current": "allocated",
    "allocated_bytes.all.peak": "peak_allocated",
    "reserved_bytes.all.current": "reserved",
    "reserved_bytes.all.peak": "peak_reserved",
    "active_bytes.all.current": "active",
    "inactive_split_bytes.all.current": "inactive_split",
    "requested_bytes.all.current": "requested",
    "num_alloc_retries": "alloc_retries",
    "num_ooms": "ooms",
}

_channel: Channel | None = None
_torch: Any = None  # the user's torch module, once imported (Any: the agent never imports torch, nor its types)
_snapshots = [0]
_history = [False]


def _send(msg: dict[str, Any]) -> None:
    ch = _channel
    if ch is not None:
        msg.setdefault("pid", os.getpid())
        ch.send(msg)


def cuda_stats(stats: Mapping[str, Any]) -> dict[str, int]:
    """The fields memscope keeps from a ``torch.cuda.memory_stats()`` dict (missing keys are left out)."""
    return {field: int(stats[key]) for key, field in _STAT_KEYS.items() if key in stats}


def _sample_cuda() -> None:
    torch = _torch
    cuda = getattr(torch, "cuda", None)
    # is_initialized() is False in a forked child (a DataLoader worker): it never samples its parent's devices.
    if cuda is None or not cuda.is_initialized():
        return
    for device in range(cuda.device_count()):
        stats = cuda_stats(cuda.memory_stats(device))
        if stats.get("reserved") or stats.get("peak_reserved"):
            _send(dict(stats, t="torch_alloc", backend="cuda", device=device))


def _sample_mps() -> None:
    mps = getattr(_torch, "mps", None)
    if mps is None:
        return
    current, driver = int(mps.current_allocated_memory()), int(mps.driver_allocated_memory())
    if current or driver:
        _send({"t": "torch_alloc", "backend": "mps", "device": 0, "allocated": current, "driver": driver})


def _run_dir() -> str | None:
    from ..protocol import ENV_DIR

    return os.environ.get(ENV_DIR)


def _on_oom(device: int, alloc: int, device_total: int, device_free: int) -> None:
    """torch's OOM observer: (device, bytes asked for, device total or the allowed maximum, device free bytes)."""
    try:
        torch = _torch
        msg: dict[str, Any] = {"t": "cuda_oom", "device": int(device), "alloc_bytes": int(alloc),
               "device_total": int(device_total), "device_free": int(device_free), "wall": time.time()}
        try:
            msg.update(cuda_stats(torch.cuda.memory_stats(device)))
        except Exception:
            pass
        try:
            msg["allocator_summary"] = torch.cuda.memory_summary(device)[:20000]
        except Exception:
            pass
        run_dir = _run_dir()
        if run_dir and _snapshots[0] < MAX_SNAPSHOTS:
            _snapshots[0] += 1
            name = _save_snapshot(torch, run_dir, dict(msg, pid=os.getpid()))
            if name:
                msg["snapshot"] = name
        _send(msg)
    except Exception:
        pass  # the user's OutOfMemoryError follows; nothing of ours may replace it


def _save_snapshot(torch: Any, run_dir: str, oom: Mapping[str, Any]) -> str | None:
    """Pickle the allocator's snapshot, the OOM's numbers added (plain types only, so memscope's safe reader and
    pytorch.org/memory_viz both read it); returns the file's name, or None."""
    try:
        import pickle

        snap = torch.cuda.memory._snapshot()
        if isinstance(snap, dict):
            snap = dict(snap, memscope_oom={k: oom[k] for k in ("device", "alloc_bytes", "device_total",
                                                                   "device_free", "pid", "wall") if k in oom})
        path = os.path.join(run_dir, "cuda_snapshot_%d_%d.pickle" % (os.getpid(), _snapshots[0]))
        with open(path + ".tmp", "wb") as f:
            pickle.dump(snap, f, protocol=4)
        os.replace(path + ".tmp", path)
        return os.path.basename(path)
    except Exception:
        return None


def save_at_exception(message: str | None) -> None:
    """An uncaught CUDA OOM that no OOM observer saw (a PyTorch without one): the snapshot now, from the excepthook.
    The traceback still holds the frames, so their tensors are still allocated."""
    try:
        torch, run_dir = _torch, _run_dir()
        if _snapshots[0] or torch is None or not run_dir or "CUDA out of memory" not in (message or ""):
            return
        if not torch.cuda.is_initialized():
            return
        _snapshots[0] += 1
        _save_snapshot(torch, run_dir, {"pid": os.getpid(), "wall": time.time()})
    except Exception:
        pass


def _on_cuda_init() -> None:
    # Runs inside torch.cuda._lazy_init(): whatever fails here must not reach it (it would become the user's error).
    try:
        torch = _torch
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            attach(_on_oom)
        entries = _env_int(HISTORY_ENV, 0)
        if entries > 0:
            try:
                torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                         max_entries=entries)
                _history[0] = True
            except Exception:
                pass
        from . import every

        every(SAMPLE_S, _sample_cuda)
    except Exception:
        pass


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _on_torch(torch: Any) -> None:
    global _torch
    _torch = torch
    cuda = getattr(torch, "cuda", None)
    lazy_call = getattr(cuda, "_lazy_call", None)
    if lazy_call is not None:
        lazy_call(_on_cuda_init)  # runs now if CUDA is already initialised, else at its first use
    if sys.platform == "darwin":
        try:
            if torch.backends.mps.is_available():
                from . import every

                every(SAMPLE_S, _sample_mps)
        except Exception:
            pass


def compile_settings() -> dict[str, Any]:
    """Inductor's compile-pool settings as this process has them (without importing anything)."""
    cfg = sys.modules.get("torch._inductor.config")
    out: dict[str, Any] = {"env": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")}
    if cfg is not None:
        out["compile_threads"] = getattr(cfg, "compile_threads", None)
        out["worker_start_method"] = getattr(cfg, "worker_start_method", None)
    return out


def _on_dynamo_callback(mod: Any) -> None:  # torch._dynamo.callback
    # Patch the handler's class, not register callbacks: torch._dynamo.reset() clears registered callbacks.
    cls = mod.CompilationCallbackHandler
    start, end = cls.run_start_callbacks, cls.run_end_callbacks

    def report(state: str, args: Any) -> None:
        try:
            trigger = getattr(getattr(args, "callback_trigger", None), "name", None)
            _send(dict(compile_settings(), t="compile", state=state, id=str(getattr(args, "compile_id", "")),
                       trigger=trigger, wall=time.time()))
        except Exception:
            pass

    def run_start_callbacks(self: Any, args: Any) -> Any:
        report("start", args)
        return start(self, args)

    def run_end_callbacks(self: Any, args: Any) -> Any:
        try:
            return end(self, args)
        finally:
            report("end", args)

    run_start_callbacks.__wrapped__ = start  # type: ignore[attr-defined]
    run_end_callbacks.__wrapped__ = end  # type: ignore[attr-defined]
    cls.run_start_callbacks = run_start_callbacks
    cls.run_end_callbacks = run_end_callbacks


def _on_compile_worker_utils(mod: Any) -> None:  # torch._inductor.compile_worker.utils
    # Every inductor compile worker runs this initializer, whatever the start method (the default sidecar and its
    # forked workers; TORCHINDUCTOR_WORKER_START=fork or spawn, whose workers look like the main or like any
    # multiprocessing child from outside): each tells the collector its role itself.
    original = mod._async_compile_initializer

    def initializer(*args: Any, **kwargs: Any) -> Any:
        try:
            _send({"t": "role", "role": "compile_worker"})
        except Exception:
            pass
        return original(*args, **kwargs)

    # spawn pickles the initializer by reference: it must be found under the original's name.
    initializer.__module__, initializer.__qualname__ = original.__module__, original.__qualname__
    initializer.__name__, initializer.__wrapped__ = original.__name__, original  # type: ignore[attr-defined]
    mod._async_compile_initializer = initializer


def install(channel: Channel) -> None:
    """Attach to torch's allocator and OOM path once the user's code imports torch."""
    global _channel
    _channel = channel
    when_imported("torch", _on_torch)
    when_imported("torch._dynamo.callback", _on_dynamo_callback)
    when_imported("torch._inductor.compile_worker.utils", _on_compile_worker_utils)
