"""GPU memory from NVML, on the collector's side: each device's used and total memory, and the GPU memory of each
process of the tree.

``Nvml.open()`` returns None where there is no NVML (no driver, no GPU, no ``nvidia-ml-py``): then the runner
starts no thread and nothing is recorded. In a container NVML reports host pids, which match none of the tree's:
each round keeps the count of GPU processes outside the tree, and the analysis falls back to the agent's numbers.
A GPU split into MIG instances is read per instance (its own memory, its own processes). Tested against a fake
NVML built from nvidia-smi captures of an H100, an H100 in MIG mode and a Tesla T4 (tests/fixtures/gpu).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from ..model import Event

MAX_ERRORS = 5  # consecutive failed rounds before the sampler gives up (a driver that went away)


NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE as older bindings pass it through (newer give None)


class Nvml:
    """An initialised NVML with its device handles; ``sample()`` reads one round."""

    def __init__(self, nvml: Any, handles: list[Any], names: list[str]) -> None:
        self._nv = nvml
        self._handles = handles
        self.names = names

    @classmethod
    def open(cls, lib: Any = None) -> "Nvml | None":
        """``lib``: the ``pynvml`` module (nvidia-ml-py), or anything with its functions (tests pass one built
        from recorded nvidia-smi captures)."""
        if lib is None:
            try:
                import pynvml as found  # nvidia-ml-py: optional
            except Exception:
                return None
            lib = found
        pynvml = lib
        try:
            pynvml.nvmlInit()
        except Exception:
            return None  # NVMLError_LibraryNotFound / DriverNotLoaded: no GPU here, stay silent
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            names = [_name(pynvml, h) for h in handles]
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
        """``{"devices": [{index, name, total, used, reserved[, mig, gpu_instance]}], "procs": [{pid, device,
        used[, mig]}], "other_procs": n, "other_used": bytes}``: procs of the tree only (``used`` None where NVML
        cannot tell: WDDM, or the driver's "not available"); other processes (other users, other containers,
        host pids seen from inside a container) are counted, with the memory NVML gives for them."""
        nv, tree = self._nv, set(tree_pids)
        devices: list[dict[str, Any]] = []
        procs: list[dict[str, Any]] = []
        others, other_used = 0, 0
        for i, h in enumerate(self._handles):
            migs = _mig_handles(nv, h)
            # Under MIG each instance has its own memory, and per-process numbers come per instance: an
            # unprivileged caller gets NO_PERMISSION for the aggregate on the parent device.
            units = [(h, None, None)] if not migs else migs
            for handle, mig, gi in units:
                dev = dict(_memory(nv, handle), index=i, name=self.names[i])
                if mig is not None:
                    dev.update(mig=mig, gpu_instance=gi)
                devices.append(dev)
                for pid, used in _processes(nv, handle).items():
                    if pid in tree:
                        row = {"pid": pid, "device": i, "used": used}
                        if mig is not None:
                            row["mig"] = mig
                        procs.append(row)
                    else:
                        others += 1
                        other_used += used or 0
        return {"devices": devices, "procs": procs, "other_procs": others, "other_used": other_used}

    def close(self) -> None:
        """Let go of NVML."""
        try:
            self._nv.nvmlShutdown()
        except Exception:
            pass


def _name(nv: Any, h: Any) -> str:
    try:
        name = nv.nvmlDeviceGetName(h)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return ""


def _memory(nv: Any, h: Any) -> dict[str, Any]:
    """total/used/reserved bytes. The v2 call (drivers R510+) splits off what the driver reserves; v1's ``used``
    includes it there (it is total - free), so v1 leaves ``reserved`` None rather than guess."""
    v2 = getattr(nv, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            m = nv.nvmlDeviceGetMemoryInfo(h, version=v2)
            return {"total": int(m.total), "used": int(m.used), "reserved": int(m.reserved)}
        except Exception:
            pass  # NVMLError_FunctionNotFound (driver < R510), NotSupported, an older binding's signature
    try:
        m = nv.nvmlDeviceGetMemoryInfo(h)
        return {"total": int(m.total), "used": int(m.used), "reserved": None}
    except Exception:
        return {"total": None, "used": None, "reserved": None}  # NotSupported: the processes are still read


def _mig_handles(nv: Any, h: Any) -> list[tuple[Any, int, int | None]]:
    """(handle, MIG device index, GPU instance id) of each MIG device this process may see; [] without MIG."""
    try:
        current, _pending = nv.nvmlDeviceGetMigMode(h)
    except Exception:
        return []  # NotSupported: a GPU without MIG
    if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
        return []
    out = []
    try:
        count = int(nv.nvmlDeviceGetMaxMigDeviceCount(h))
    except Exception:
        return []
    for j in range(count):
        try:
            mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except Exception:
            continue  # NotFound: no instance in this slot (or not visible from this container)
        try:
            gi: int | None = int(nv.nvmlDeviceGetGpuInstanceId(mh))
        except Exception:
            gi = None
        out.append((mh, j, gi))
    return out


def _processes(nv: Any, h: Any) -> dict[int, int | None]:
    """pid -> used bytes (None: not available) of compute and graphics processes on one device or MIG device."""
    seen: dict[int, int | None] = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            running = getattr(nv, getter)(h)
        except Exception:
            continue  # NoPermission (MIG aggregate, unprivileged), NotSupported
        for p in running:
            used = getattr(p, "usedGpuMemory", None)
            if used is not None and int(used) >= NOT_AVAILABLE:
                used = None  # NVML_VALUE_NOT_AVAILABLE from a binding that passes it through
            pid = int(p.pid)
            prev = seen.get(pid)
            seen[pid] = max(prev or 0, int(used)) if used is not None else prev
    return seen


def sample_loop(
    nvml: Nvml,
    publish: Callable[[Event], None],
    clock: Callable[[], float],
    tree_pids: Callable[[], Iterable[int]],
    done: threading.Event,
    interval_s: float,
) -> None:
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

    base = record_path[: -len(".sqlite")] if record_path.endswith(".sqlite") else record_path
    dest = f"{base}.{os.path.basename(path)}"
    shutil.move(path, dest)
    try:
        os.chmod(dest, 0o600)  # beside the record, as private as it: a snapshot holds stacks and file paths
    except OSError:
        pass
    return dest
