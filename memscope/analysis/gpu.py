"""GPU and PyTorch-allocator verdicts, as pure functions of recorded data.

- ``allocator``: the caching allocator per process and device (from the agent's ``torch_alloc`` messages) and the
  CUDA OOMs the allocator's observer saw (``cuda_oom``).
- ``gpu``: device and per-process GPU memory from NVML (``gpu`` records); where NVML's pids are not the tree's (a
  container: NVML reports host pids), the agent's own numbers per process instead.
- ``compile_pool``: torch.compile's compile-worker pool (inductor's SubprocPool: a sidecar and its workers), its
  PSS, and whether it outlived compilation.
- ``cuda_oom_message``: the exit message for a CUDA OOM, from PyTorch's error text and the observer's numbers.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from ..fmt import fmt_bytes
from ..model import KIND_PSS, CudaOomInfo
from .supervision import main_pid

MiB, GiB = 1 << 20, 1 << 30
FRAGMENTED_FRACTION = 0.25  # inactive-split share of reserved memory worth a hint
FRAGMENTED_BYTES = 512 * MiB
POOL_AFTER_COMPILE_S = 5.0  # a pool seen this long after the last compilation ended outlived it
COMPILE_SETTING = "TORCHINDUCTOR_COMPILE_THREADS"


# -- allocator ----------------------------------------------------------------------------------------------------
def allocator(
    samples: Iterable[Mapping[str, Any]],
    ooms: Iterable[Mapping[str, Any]] = (),
    snapshots: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """Summary key ``allocator``. ``samples``: ``torch_alloc`` events ({"t", "pid", "data"}); ``ooms``: ``cuda_oom``
    events; ``snapshots``: snapshot file name -> where the collector kept it."""
    by_dev: dict[tuple[Any, ...], list[tuple[float, Mapping[str, Any]]]] = {}
    for ev in samples:
        d = ev.get("data") or {}
        key = (ev.get("pid") or d.get("pid"), str(d.get("backend", "cuda")), int(d.get("device") or 0))
        by_dev.setdefault(key, []).append((float(ev.get("t") or 0.0), d))
    oom_list = [_oom_row(ev, snapshots or {}) for ev in ooms]
    if not by_dev and not oom_list:
        return None
    devices = []
    for (pid, backend, device), rows in sorted(by_dev.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], kv[0][2])):
        seen = sum(1 for r in oom_list if r["pid"] == pid and int(r.get("device") or 0) == device)
        devices.append(_device_row(pid, backend, device, rows, seen))
    # One line for the summary's advice (analysis/advice.py lifts ``advice``): the biggest device that has one.
    advised = [d for d in devices if d.get("advice")]
    top = max(advised, key=lambda d: d.get("peak_reserved_bytes") or 0)["advice"] if advised else None
    return {"devices": devices, "ooms": oom_list, "advice": top}


def _device_row(
    pid: Any, backend: str, device: int, rows: list[tuple[float, Mapping[str, Any]]], ooms_seen: int = 0
) -> dict[str, Any]:
    """One process's allocator on one device; ``ooms_seen``: the CUDA OOMs its observer reported there (a sample
    taken before the OOM does not count it)."""

    def peak(field: str, current: str) -> int:
        return max(max(int(d.get(field) or 0), int(d.get(current) or 0)) for _, d in rows)

    last = rows[-1][1]
    row: dict[str, Any] = {
        "pid": pid,
        "backend": backend,
        "device": device,
        "samples": len(rows),
        "peak_allocated_bytes": peak("peak_allocated", "allocated"),
        "last_allocated_bytes": int(last.get("allocated") or 0),
    }
    if backend == "mps":
        row["peak_driver_bytes"] = peak("driver", "driver")
        row["last_driver_bytes"] = int(last.get("driver") or 0)
        row["advice"] = None
        return row
    reserved = int(last.get("reserved") or 0)
    # Fragmentation where it was worst: the share of reserved memory held in split blocks nothing uses.
    worst = max(rows, key=lambda r: _frag(r[1]))[1]
    row.update(
        {
            "peak_reserved_bytes": peak("peak_reserved", "reserved"),
            "last_reserved_bytes": reserved,
            "reserved_unallocated_bytes": max(0, reserved - int(last.get("allocated") or 0)),
            "fragmentation": round(_frag(worst), 3),
            "inactive_split_bytes": int(worst.get("inactive_split") or 0),
            "alloc_retries": max(int(d.get("alloc_retries") or 0) for _, d in rows),
            "ooms": max(int(d.get("ooms") or 0) for _, d in rows),
        }
    )
    row["ooms"] = max(row["ooms"], ooms_seen)
    row["advice"] = _allocator_advice(row)
    return row


def _frag(d: Mapping[str, Any]) -> float:
    reserved = int(d.get("reserved") or 0)
    return int(d.get("inactive_split") or 0) / reserved if reserved else 0.0


def _allocator_advice(r: Mapping[str, Any]) -> str | None:
    where = f"pid {r['pid']} cuda:{r['device']}"
    if r["inactive_split_bytes"] >= FRAGMENTED_BYTES and r["fragmentation"] >= FRAGMENTED_FRACTION:
        return (
            f"{where}: {fmt_bytes(r['inactive_split_bytes'], 'torch')} ({r['fragmentation']:.0%}) of the memory PyTorch "
            "reserved sat in split blocks nothing used (fragmentation); "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the allocator grow segments instead."
        )
    # Each CUDA OOM comes after one retry of its own (the cache freed, the allocation tried again, failed again):
    # only the retries that then succeeded stalled a training that went on.
    stalls = r["alloc_retries"] - r.get("ooms", 0)
    if stalls > 0:
        return (
            f"{where}: cudaMalloc failed {stalls} times and PyTorch freed its cache and retried: "
            "the device is at its limit and each retry stalls training; lower the batch size or the "
            "memory held between steps."
        )
    return None


def _oom_row(ev: Mapping[str, Any], snapshots: Mapping[str, str]) -> dict[str, Any]:
    d = ev.get("data") or {}
    snap = d.get("snapshot")
    return {
        "t_s": round(float(ev.get("t") or 0.0), 3),
        "pid": ev.get("pid") or d.get("pid"),
        "device": d.get("device"),
        "alloc_bytes": d.get("alloc_bytes"),
        "device_total_bytes": d.get("device_total"),
        "device_free_bytes": d.get("device_free"),
        "allocated_bytes": d.get("allocated"),
        "reserved_bytes": d.get("reserved"),
        "snapshot": snapshots.get(snap, snap) if snap else None,
        "allocator_summary": d.get("allocator_summary"),
    }


# -- NVML ---------------------------------------------------------------------------------------------------------
def gpu(
    rounds: Iterable[Mapping[str, Any]], roles: Mapping[int, str], alloc_samples: Iterable[Mapping[str, Any]] = ()
) -> dict[str, Any] | None:
    """Summary key ``gpu``. ``rounds``: ``gpu`` events (the collector's NVML rounds: ``devices`` (MIG instances
    each on their own) and ``procs`` of the tree, ``other_procs``/``other_used`` not in it); ``roles``: pid ->
    role; ``alloc_samples``: ``torch_alloc`` events."""
    rounds = list(rounds)
    devices: dict[tuple[int, int], dict[str, Any]] = {}
    per_pid: dict[int, int] = {}
    where: dict[int, dict[str, Any]] = {}
    unknown: set[int] = set()  # pids NVML listed with "not available" memory (WDDM, the driver's N/A)
    tree_peak, foreign, foreign_used = 0, 0, 0
    for ev in rounds:
        d = ev.get("data") or {}
        for dev in d.get("devices") or []:
            key = (int(dev["index"]), -1 if dev.get("mig") is None else int(dev["mig"]))
            row = devices.get(key)
            if row is None:
                row = devices[key] = {
                    "index": int(dev["index"]),
                    "name": dev.get("name"),
                    "total_bytes": dev.get("total"),
                    "peak_used_bytes": 0,
                    "last_used_bytes": 0,
                }
                if dev.get("mig") is not None:
                    row.update(mig=int(dev["mig"]), gpu_instance=dev.get("gpu_instance"))
                if dev.get("reserved") is not None:
                    row["driver_reserved_bytes"] = int(dev["reserved"])
            row["peak_used_bytes"] = max(row["peak_used_bytes"], int(dev.get("used") or 0))
            row["last_used_bytes"] = int(dev.get("used") or 0)
        total = 0
        for p in d.get("procs") or []:
            pid = int(p["pid"])
            if p.get("used") is None:
                unknown.add(pid)
                continue
            used = int(p["used"])
            if used >= per_pid.get(pid, -1):
                where[pid] = {"device": p.get("device"), **({"mig": p["mig"]} if p.get("mig") is not None else {})}
            per_pid[pid] = max(per_pid.get(pid, 0), used)
            total += used
        tree_peak = max(tree_peak, total)
        foreign = max(foreign, int(d.get("other_procs") or 0))
        foreign_used = max(foreign_used, int(d.get("other_used") or 0))
    agent = _agent_gpu(alloc_samples)
    if not rounds and not agent:
        return None
    if per_pid or not agent:
        source, procs = "nvml", per_pid
    else:
        # NVML saw GPU processes but none of the tree's pids (host pids seen from a container), gave no numbers
        # for them ("not available"), or NVML is absent: what PyTorch reserved in each process is the nearest.
        source, procs = "agent", agent
        tree_peak = max(tree_peak, sum(agent.values()))
    return {
        "source": source,
        # Our processes used the GPU (the agent says so) yet NVML listed none of their pids, only others.
        "pid_mismatch": bool(rounds) and not per_pid and not unknown and foreign > 0 and bool(agent),
        "devices": [devices[k] for k in sorted(devices)],
        "processes": [
            dict({"pid": pid, "role": roles.get(pid, "other"), "peak_used_bytes": b}, **where.get(pid, {}))
            for pid, b in sorted(procs.items(), key=lambda kv: -kv[1])
        ],
        # Tree processes NVML listed without a number (WDDM, the driver's "not available").
        "not_available_pids": sorted(unknown - set(per_pid)),
        "tree_peak_bytes": tree_peak,
        "other_processes": foreign,
        "other_peak_used_bytes": foreign_used,
    }


def _agent_gpu(samples: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for ev in samples:
        d = ev.get("data") or {}
        if d.get("backend", "cuda") != "cuda" or ev.get("pid") is None:
            continue
        b = max(int(d.get("reserved") or 0), int(d.get("peak_reserved") or 0))
        out[int(ev["pid"])] = max(out.get(int(ev["pid"]), 0), b)
    return out


# -- torch.compile's worker pool ----------------------------------------------------------------------------------
def compile_windows(events: Iterable[Mapping[str, Any]]) -> list[tuple[int | None, float, float | None]]:
    """(pid, start_s, end_s) of each compilation from ``compile`` events; end None while one is still going."""
    open_: dict[Any, float] = {}
    out: list[tuple[int | None, float, float | None]] = []
    for ev in sorted(events, key=lambda e: e.get("t") or 0.0):
        d = ev.get("data") or {}
        pid = ev.get("pid")
        if d.get("state") == "start":
            open_[pid] = float(ev["t"])
        elif d.get("state") == "end" and pid in open_:
            out.append((pid, open_.pop(pid), float(ev["t"])))
    out.extend((pid, t, None) for pid, t in open_.items())
    return sorted(out, key=lambda w: w[1])


def compile_pool(
    procs: Iterable[Mapping[str, Any]],
    pool_t: list[float],
    pool_pss: list[float],
    compile_events: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any] | None:
    """Summary key ``compile_pool``. ``procs``: the record's processes (pid, ppid, role); ``pool_t``/``pool_pss``:
    the summed PSS of the compile_worker processes per PSS round; ``compile_events``: the agent's ``compile``."""
    pool = {int(p["pid"]): p for p in procs if p.get("role") == "compile_worker"}
    if not pool:
        return None
    events = list(compile_events)
    windows = compile_windows(events)
    # The default pool is a sidecar (python .../compile_worker/__main__.py) and the workers it forks; with
    # TORCHINDUCTOR_WORKER_START=fork/spawn the workers are the main's own children and there is no sidecar.
    sidecars = [
        pid for pid, p in pool.items() if p.get("ppid") not in pool and "compile_worker" in str(p.get("cmdline") or "")
    ]
    seen = [(t, y) for t, y in zip(pool_t, pool_pss) if y]
    ends = [end for _, _, end in windows if end is not None]
    still_compiling = any(end is None for _, _, end in windows)
    last_end = max(ends) if ends else None
    alive_after: bool | None = None
    alive_s: float | None = None
    if last_end is not None and not still_compiling:
        # How long the pool lived on: its processes' exit times (the sampler sees an exit within a discovery
        # round), not the PSS rounds, which space out on a big tree. The last PSS round with the pool in it
        # stands in for a process whose exit was never recorded.
        after = [t for t, _ in seen if t > last_end]
        last_seen = max(after) if after else last_end
        exits = [p.get("exit_t") for p in pool.values()]
        exit_ts: list[float] = [e for e in exits if e is not None]
        if exits and len(exit_ts) == len(exits):
            last_seen = max(last_seen, max(exit_ts))
        alive_s = round(max(0.0, last_seen - last_end), 3)
        alive_after = alive_s >= POOL_AFTER_COMPILE_S
    settings = next((e.get("data") or {} for e in reversed(events) if (e.get("data") or {}).get("state")), {})
    peak = max((y for _, y in seen), default=None)
    out: dict[str, Any] = {
        "processes": len(pool),
        "workers": len(pool) - len(sidecars),
        "pids": sorted(pool),
        "peak_pss_bytes": int(peak) if peak is not None else None,
        "last_pss_bytes": int(seen[-1][1]) if seen else None,
        "compilations": len(windows),
        "compile_s": round(sum((e if e is not None else s) - s for _, s, e in windows), 3),
        "last_compile_end_s": round(last_end, 3) if last_end is not None else None,
        "alive_after_compile": alive_after,
        "alive_s_after_compile": alive_s,
        "compile_threads": settings.get("compile_threads"),
        "setting": COMPILE_SETTING,
    }
    out["advice"] = _pool_advice(out)
    return out


def _pool_advice(p: Mapping[str, Any]) -> str:
    what = f"torch.compile's worker pool ({p['processes']} processes: {p['workers']} workers"
    what += f" and {p['processes'] - p['workers']} sidecar)" if p["processes"] > p["workers"] else ")"
    held = f" held {fmt_bytes(p['peak_pss_bytes'], 'torch')} PSS at its peak" if p["peak_pss_bytes"] else ""
    if p["alive_after_compile"]:
        held += f" and stayed alive {p['alive_s_after_compile']:.0f} s after the last compilation ended"
    return (
        f"{what}{held}; {COMPILE_SETTING}=1 in the run's environment compiles in the main process with no "
        "pool (slower compilation, no worker memory); a smaller number keeps fewer workers."
    )


# -- the exit message of a CUDA OOM -------------------------------------------------------------------------------
_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": GiB, "TiB": 1 << 40}
_SIZE = r"([\d.]+)\s*(B|bytes|KiB|MiB|GiB|TiB)"
# The wordings of PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp), newest first in each entry:
#   2.1+:  "Tried to allocate X. GPU 0 has a total capacity of X of which X is free. [Process N has X memory in
#          use. ...] [Including non-PyTorch memory, this process has X memory in use.] Of the allocated memory X
#          is allocated by PyTorch, and X is reserved by PyTorch but unallocated." (2.1.x spells "capacty"; under
#          set_per_process_memory_fraction "X allowed;" follows the process's use, as a real H200 printed it)
#   1.5-2.0: "Tried to allocate X (GPU 0; X total capacity; X already allocated; X free; X reserved in total by
#          PyTorch)"; before 1.5 the last item was "X cached". Lines may come wrapped: any run of spaces matches.
_PATTERNS = {
    "alloc": r"Tried\s+to\s+allocate\s+" + _SIZE,
    "device": r"GPU\s+(\d+)",
    "total": r"total\s+capac(?:i)?ty\s+of\s+" + _SIZE + r"|" + _SIZE + r"\s+total\s+capacity",
    "free": r"of\s+which\s+" + _SIZE + r"\s+is\s+free|" + _SIZE + r"\s+free\b",
    "allocated": r"Of\s+the\s+allocated\s+memory\s+"
    + _SIZE
    + r"\s+is\s+allocated\s+by\s+PyTorch|"
    + _SIZE
    + r"\s+already\s+allocated",
    "reserved_unallocated": _SIZE + r"\s+is\s+reserved\s+by\s+PyTorch\s+but\s+unallocated",
    "reserved": _SIZE + r"\s+reserved\s+in\s+total\s+by\s+PyTorch|" + _SIZE + r"\s+cached\b",
    "this_process": r"this\s+process\s+has\s+" + _SIZE + r"\s+memory\s+in\s+use",
    # torch.cuda.set_per_process_memory_fraction: "... memory in use. 2.80 GiB allowed; Of the allocated ..."
    "allowed": _SIZE + r"\s+allowed\s*;",
}


def _size(m: re.Match[str]) -> int | None:
    groups = [g for g in m.groups() if g is not None]
    if len(groups) < 2:
        return None
    return int(float(groups[0]) * _UNITS[groups[1]])


def _capacity_and_cap(n: Mapping[str, Any], o: Mapping[str, Any]) -> tuple[Any, Any]:
    """(the device's capacity, the process's own cap or None) from a parsed message ``n`` and the observer's numbers
    ``o``. Under torch.cuda.set_per_process_memory_fraction the observer's "device total" is the cap (torch passes
    its allowed maximum) and the message says "X allowed;": the device's capacity is then the message's."""
    if n.get("allowed") is not None:
        return n.get("total"), o.get("device_total") or n["allowed"]
    return (o["device_total"] if o.get("device_total") is not None else n.get("total")), None


def is_cuda_oom(exc_type: str | None, message: str | None) -> bool:
    """torch.OutOfMemoryError (2.x; torch.cuda.OutOfMemoryError 1.13+) or the RuntimeError of older versions."""
    name = str(exc_type or "")
    return "CUDA out of memory" in (message or "") and (
        name.endswith("OutOfMemoryError") or name.endswith("RuntimeError")
    )


def parse_cuda_oom(text: str) -> dict[str, Any]:
    """The numbers in PyTorch's "CUDA out of memory" message, every wording since 1.x (see ``_PATTERNS``); missing
    ones are left out. ``processes``: [(pid, bytes)] of the "Process N has X memory in use" lines (the other
    processes NVML listed on the device); ``this_process``: the raising process's own use, non-PyTorch included."""
    text = text or ""
    out: dict[str, Any] = {}
    for key, pat in _PATTERNS.items():
        m = re.search(pat, text)
        if m is None:
            continue
        out[key] = int(m.group(1)) if key == "device" else _size(m)
    if "reserved" not in out and "allocated" in out and "reserved_unallocated" in out:
        out["reserved"] = out["allocated"] + out["reserved_unallocated"]
    procs = re.findall(r"Process\s+(\d+)\s+has\s+" + _SIZE + r"\s+memory\s+in\s+use", text)
    if procs:
        out["processes"] = [(int(pid), int(float(v) * _UNITS[u])) for pid, v, u in procs]
    if re.search(r"has\s+a\s+total\s+capac|memory\s+in\s+use|is\s+allocated\s+by\s+PyTorch", text):
        out["form"] = "2.1+"
    elif re.search(r"total\s+capacity;|already\s+allocated|\bcached\)", text):
        out["form"] = "older"
    return {k: v for k, v in out.items() if v is not None}


def cuda_oom(
    exceptions: Mapping[int, Mapping[str, Any]],
    observed: Mapping[int, Mapping[str, Any]],
    roles: Mapping[int, str],
    main: int | None = None,
    snapshots: Mapping[str, str] | None = None,
) -> CudaOomInfo | None:
    """Summary key ``cuda_oom`` (model.CudaOomInfo): the CUDA OOM a process of the tree raised (the main's first),
    from PyTorch's message completed by the allocator's OOM observer: what was tried, the device's capacity and free
    memory, the process's own cap if it had one, what PyTorch held, and each process on the device with its share
    and whether it is one of the run's."""
    ooms = {pid: e for pid, e in exceptions.items() if is_cuda_oom(e.get("type"), e.get("message"))}
    if not ooms:
        return None
    pid = main if main in ooms else sorted(ooms)[0]
    n = parse_cuda_oom(ooms[pid].get("message") or "")
    o = observed.get(pid) or {}

    def pick(key: str, obs: str) -> Any:  # the observer's exact numbers first, the message's rounded ones else
        return o.get(obs) if o.get(obs) is not None else n.get(key)

    capacity, cap = _capacity_and_cap(n, o)

    procs: list[dict[str, Any]] = []
    if n.get("this_process") is not None:
        procs.append(
            {"pid": pid, "used_bytes": n["this_process"], "in_tree": True, "role": roles.get(pid), "this_process": True}
        )
    for p, b in n.get("processes", []):
        procs.append({"pid": p, "used_bytes": b, "in_tree": p in roles, "role": roles.get(p), "this_process": p == pid})
    out: CudaOomInfo = {
        "pid": pid,
        "role": roles.get(pid),
        "form": n.get("form"),
        "device": pick("device", "device"),
        "tried_bytes": pick("alloc", "alloc_bytes"),
        "capacity_bytes": capacity,
        "allowed_bytes": cap,
        "free_bytes": pick("free", "device_free"),
        "allocated_bytes": pick("allocated", "allocated"),
        "reserved_bytes": pick("reserved", "reserved"),
        "reserved_unallocated_bytes": n.get("reserved_unallocated"),
        "processes": procs,
        # The observer's snapshot; else one the excepthook saved (no observer): cuda_snapshot_<pid>_<n>.pickle.
        "snapshot": o.get("snapshot")
        or next(
            (path for name, path in sorted((snapshots or {}).items()) if name.startswith(f"cuda_snapshot_{pid}_")), None
        ),
    }
    if (
        out["reserved_unallocated_bytes"] is None
        and out["reserved_bytes"] is not None
        and out["allocated_bytes"] is not None
    ):
        out["reserved_unallocated_bytes"] = max(0, out["reserved_bytes"] - out["allocated_bytes"])
    listed_others = [p for p in procs if not p["this_process"]]
    # Inside a container NVML names processes by host pid: the raising process is then listed as "Process N"
    # (seed 003's Kaggle OOM: one process, nearly all of the device) and no pid of the message is the run's.
    out["host_pids"] = (
        bool(listed_others) and not any(p["in_tree"] for p in listed_others) and n.get("this_process") is None
    )
    out["advice"] = _cuda_oom_advice(out)
    return out


def _cuda_oom_advice(o: Mapping[str, Any]) -> str | None:
    tried, unalloc = o.get("tried_bytes"), o.get("reserved_unallocated_bytes")
    gpu = f"GPU {o['device']}" if o.get("device") is not None else "the GPU"
    if tried and unalloc is not None and unalloc >= tried:
        return (
            f"The CUDA OOM on {gpu} asked for {fmt_bytes(tried, 'torch')} while PyTorch held {fmt_bytes(unalloc, 'torch')} reserved "
            "but unallocated: fragmentation. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the "
            "allocator grow segments instead of splitting them."
        )
    if tried and o.get("allowed_bytes"):
        mine = next((p["used_bytes"] for p in o.get("processes") or [] if p.get("this_process")), None)
        held = f"held {fmt_bytes(mine, 'torch')} and " if mine is not None else ""
        return (
            f"The CUDA OOM on {gpu} is this process's own cap, not the device: it may use "
            f"{fmt_bytes(o['allowed_bytes'], 'torch')} (torch.cuda.set_per_process_memory_fraction), {held}asked "
            f"{fmt_bytes(tried, 'torch')} more, while the device had {fmt_bytes(o.get('free_bytes'), 'torch')} free: "
            "raise the fraction, or lower the batch size."
        )
    others = [p for p in o.get("processes") or [] if not p.get("in_tree") and not o.get("host_pids")]
    if others:
        held = sum(p["used_bytes"] for p in others)
        return (
            f"Other processes held {fmt_bytes(held, 'torch')} of {gpu} when it ran out ("
            + ", ".join(f"pid {p['pid']} {fmt_bytes(p['used_bytes'], 'torch')}" for p in others[:4])
            + "): free the device of them, or budget for them."
        )
    if tried:
        mine = (
            (
                "; no pid in the message is one of the run's: inside a container NVML names processes by host pid, so "
                "the one listed may be this process itself"
            )
            if o.get("host_pids")
            else ""
        )
        return (
            f"The CUDA OOM on {gpu} is a real shortage ({fmt_bytes(o.get('free_bytes'), 'torch')} free of "
            f"{fmt_bytes(o.get('capacity_bytes'), 'torch')}, {fmt_bytes(tried, 'torch')} asked{mine}): lower the batch size, use "
            "activation checkpointing, and .detach() what you keep between steps."
        )
    return None


def cuda_oom_message(exc_message: str, where: str | None = None, observed: Mapping[str, Any] | None = None) -> str:
    """'CUDA ran out of memory ...': the allocation that failed and what PyTorch had reserved, from the error text,
    completed by what the allocator's OOM observer recorded (``observed``: a ``cuda_oom`` message)."""
    n = parse_cuda_oom(exc_message)
    o = observed or {}
    alloc = o.get("alloc_bytes") or n.get("alloc")
    device = o.get("device", n.get("device"))
    total, cap = _capacity_and_cap(n, o)
    free = o.get("device_free", n.get("free"))
    allocated = o.get("allocated", n.get("allocated"))
    reserved = o.get("reserved", n.get("reserved"))
    if alloc is None and allocated is None and reserved is None:
        first = (exc_message or "").strip().splitlines()
        return f"CUDA ran out of memory: {first[0][:300] if first else 'torch.OutOfMemoryError'}"
    gpu = f"GPU {device}" if device is not None else "the GPU"
    at = f" at {where}" if where else ""
    parts = [f"CUDA ran out of memory{at}: an allocation of {fmt_bytes(alloc, 'torch')} failed on {gpu}"]
    if total is not None or free is not None:
        parts[0] += f" ({fmt_bytes(free, 'torch')} free of {fmt_bytes(total, 'torch')})"
    if cap is not None:
        parts[0] += (
            f", over this process's cap of {fmt_bytes(cap, 'torch')} (torch.cuda.set_per_process_memory_fraction)"
        )
    if reserved is not None:
        held = f"PyTorch had reserved {fmt_bytes(reserved, 'torch')}"
        if allocated is not None:
            held += (
                f": {fmt_bytes(allocated, 'torch')} allocated to tensors, {fmt_bytes(max(0, reserved - allocated), 'torch')} "
                "cached but unallocated"
            )
        parts.append(held)
    elif allocated is not None:
        parts.append(f"PyTorch had {fmt_bytes(allocated, 'torch')} allocated to tensors")
    others = [(pid, b) for pid, b in n.get("processes", [])]
    if n.get("this_process") is not None:
        parts.append(
            f"this process held {fmt_bytes(n['this_process'], 'torch')} of the GPU, non-PyTorch memory included"
        )
    if others:
        parts.append(
            "processes on the GPU: " + ", ".join(f"pid {pid} {fmt_bytes(b, 'torch')}" for pid, b in others[:4])
        )
    if reserved is not None and allocated is not None and alloc and reserved - allocated >= alloc:
        parts.append(
            "the cache held enough free memory but not in one piece (fragmentation): try "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    if o.get("snapshot"):
        parts.append(
            f"a memory snapshot was saved: {o['snapshot']} (memscope snapshot FILE --html OUT, or "
            "memscope.open_snapshot(FILE))"
        )
    return "; ".join(parts) + "."


def summary_keys(rd: Any) -> dict[str, Any]:
    """``allocator``, ``gpu``, ``compile_pool`` and ``cuda_oom`` from a run's record (a ``record.reader.RunData``)."""
    procs = rd.processes()
    alloc = rd.events("torch_alloc")
    snapshots = {e["data"].get("name"): e["data"].get("path") for e in rd.events("cuda_snapshot")}
    pool_t, pool_pss = rd.role_totals(KIND_PSS).get("compile_worker", ([], []))
    roles = {p["pid"]: p["role"] for p in procs}
    main = main_pid(procs, rd.run_row()["root_pid"]) if procs else None
    return {
        "cuda_oom": cuda_oom(
            {e["pid"]: e["data"] for e in rd.events("exception")}, observed_ooms(rd), roles, main, snapshots
        ),
        "allocator": allocator(alloc, rd.events("cuda_oom"), snapshots),
        "gpu": gpu(rd.events("gpu"), {p["pid"]: p["role"] for p in procs}, alloc),
        "compile_pool": compile_pool(procs, pool_t, pool_pss, rd.events("compile")),
    }


def observed_ooms(rd: Any) -> dict[int, dict[str, Any]]:
    """pid -> its last ``cuda_oom`` message, with the snapshot's name replaced by where the record keeps it."""
    snapshots = {e["data"].get("name"): e["data"].get("path") for e in rd.events("cuda_snapshot")}
    out: dict[int, dict[str, Any]] = {}
    for e in rd.events("cuda_oom"):
        d = dict(e["data"])
        if d.get("snapshot"):
            d["snapshot"] = snapshots.get(d["snapshot"], d["snapshot"])
        out[e["pid"]] = d
    return out
