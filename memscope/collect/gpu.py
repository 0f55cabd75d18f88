"""GPU memory from NVML, on the collector's side: each device's used and total memory, and the GPU memory of each
process of the tree.

``Nvml.open()`` returns None where there is no NVML (no driver, no GPU, no ``nvidia-ml-py``): then the runner
starts no thread and nothing is recorded. In a container NVML reports host pids, which match none of the tree's:
each round keeps the count of GPU processes outside the tree, and the analysis falls back to the agent's numbers.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from ..model import Event

MAX_ERRORS = 5   # consecutive failed rounds before the sampler gives up (a driver that went away)


class Nvml:
    """An initialised NVML with its device handles; ``sample()`` reads one round."""

    def __init__(self, nvml: Any, handles: list[Any], names: list[str]) -> None:
        self._nv = nvml
        self._handles = handles
        self.names = names

    @classmethod
    def open(cls) -> "Nvml | None":
        try:
            import pynvml  # nvidia-ml-py: optional
        except Exception:
            return None
        try:
            pynvml.nvmlInit()
        except Exception:
            return None  # NVMLError_LibraryNotFound / DriverNotLoaded: no GPU here, stay silent
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            names = []
            for h in handles:
                try:
                    name = pynvml.nvmlDeviceGetName(h)
                    names.append(name.decode() if isinstance(name, bytes) else str(name))
                except Exception:
                    names.append("")
            if not handles:
                raise RuntimeError("no devices")
            return cls(pynvml, handles, names)
        except Exception:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass
            return None

    def sample(self, tree_pids: Iterable[int]) -> dict[str, Any]:
        """``{"devices": [{index, name, total, used}], "procs": [{pid, device, used}], "other_procs": n}``: procs
        of the tree only (GPU memory per process and device; ``used`` None where NVML cannot tell)."""
        nv, tree = self._nv, set(tree_pids)
        devices, procs, others = [], [], 0
        for i, h in enumerate(self._handles):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            devices.append({"index": i, "name": self.names[i], "total": int(mem.total), "used": int(mem.used)})
            seen: dict[int, int | None] = {}
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                try:
                    running = getattr(nv, getter)(h)
                except Exception:
                    continue
                for p in running:
                    used = getattr(p, "usedGpuMemory", None)  # None: NVML_VALUE_NOT_AVAILABLE (e.g. under MIG)
                    prev = seen.get(int(p.pid))
                    seen[int(p.pid)] = max(prev or 0, int(used)) if used is not None else prev
            for pid, used in seen.items():
                if pid in tree:
                    procs.append({"pid": pid, "device": i, "used": used})
                else:
                    others += 1
        return {"devices": devices, "procs": procs, "other_procs": others}

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:
            pass


def sample_loop(nvml: Nvml, publish: Callable[[Event], None], clock: Callable[[], float],
                tree_pids: Callable[[], Iterable[int]], done: threading.Event, interval_s: float) -> None:
    """Publish an Event(kind "gpu") per round until ``done`` is set; never raises (a failing NVML goes quiet)."""
    errors = 0
    try:
        while not done.is_set() and errors < MAX_ERRORS:
            try:
                data = nvml.sample(tree_pids())
                publish(Event(clock(), None, "gpu", data))
                errors = 0
            except Exception:
                errors += 1
            done.wait(interval_s)
    finally:
        nvml.close()


def keep_snapshot(path: str, record_path: str) -> str:
    """Move a CUDA memory snapshot the agent left in the run's temporary directory next to the record."""
    import os
    import shutil

    base = record_path[:-len(".sqlite")] if record_path.endswith(".sqlite") else record_path
    dest = f"{base}.{os.path.basename(path)}"
    shutil.move(path, dest)
    return dest
