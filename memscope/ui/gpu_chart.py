"""The dashboard's GPU chart: GPU memory over time, shown only once the run has GPU data.

It is a second ``MemoryChart`` fed with the same payload shape, relabelled: the stacked areas are each role's GPU
memory (NVML per process; PyTorch's reserved bytes per process where NVML's pids are not the tree's), the lines are
PyTorch's allocated and reserved bytes summed over the tree (the agent's ``torch_alloc``), the devices' free memory
and their total. Fed from the run's records (``add``) or read back from a record (``from_record``).
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

from ..record.reader import RunData

MAX_POINTS = 2000  # per series: the chart holds the whole run, thinned evenly past this

LABELS = {
    "tree_pss": "GPU used by the tree",
    "main_rss": "PyTorch allocated",
    "tree_rss": "PyTorch reserved",
    "host_available": "device free",
    "limit": "device total",
}


class GpuSeries:
    """GPU data of one run for the chart. Thread-safe: ``add`` from a subscriber, ``snapshot`` from the view."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rounds: list[tuple[float, dict[str, Any]]] = []  # NVML rounds
        self._alloc: list[tuple[float, int, str, int, dict[str, Any]]] = []  # (t, pid, backend, device, stats)
        self._tree_on_gpu = False
        self.version = 0

    @property
    def has_data(self) -> bool:
        """True once a process of the tree holds GPU memory: a CPU-only run on a GPU machine gets no GPU chart."""
        return self._tree_on_gpu or bool(self._alloc)

    def add_event(self, kind: str, t: float, pid: int | None, data: Mapping[str, Any]) -> None:
        """Take one GPU sample or allocator event."""
        with self._lock:
            if kind == "gpu":
                self._rounds.append((t, dict(data)))
                self._tree_on_gpu = self._tree_on_gpu or bool(data.get("procs"))
            elif kind == "torch_alloc" and pid is not None:
                self._alloc.append((t, pid, str(data.get("backend", "cuda")), int(data.get("device") or 0), dict(data)))
            else:
                return
            # A long run: halve what is kept (evenly), so a snapshot stays cheap for the kernel.
            if len(self._rounds) > 4 * MAX_POINTS:
                self._rounds = self._rounds[::2]
            if len(self._alloc) > 4 * MAX_POINTS:
                self._alloc = self._alloc[::2]
            self.version += 1

    def add(self, rec: Any) -> None:
        """A record from ``Run.subscribe``: GPU rounds and allocator samples are kept, everything else ignored."""
        if type(rec).__name__ == "Event" and rec.kind in ("gpu", "torch_alloc"):
            self.add_event(rec.kind, rec.t, rec.pid, rec.data)

    @classmethod
    def from_record(cls, path: str) -> "GpuSeries":
        """The GPU series of a recorded run."""
        s = cls()
        s.load(path)
        return s

    def load(self, path: str) -> None:
        """Add what a run's record holds so far (a dashboard opened on a run that already has GPU data)."""
        try:
            rd = RunData(path)
            try:
                events = rd.events("gpu") + rd.events("torch_alloc")
            finally:
                rd.close()
        except Exception:
            return
        for e in sorted(events, key=lambda e: e["t"]):
            self.add_event(e["kind"], e["t"], e["pid"], e["data"])

    def per_pid(self, peak: bool = False) -> dict[int, int]:
        """GPU bytes of each process of the tree, for the process table: NVML's number in the last round (or the
        highest, with ``peak``), else what PyTorch reserved in it (the agent's last sample)."""
        with self._lock:
            rounds, alloc = list(self._rounds), list(self._alloc)
        out: dict[int, int] = {}
        for _, d in rounds if peak else rounds[-1:]:
            now: dict[int, int] = {}
            for p in d.get("procs") or []:
                if p.get("used") is not None:
                    now[int(p["pid"])] = now.get(int(p["pid"]), 0) + int(p["used"])
            for pid, b in now.items():
                out[pid] = max(out.get(pid, 0), b) if peak else b
        if not out:
            last: dict[tuple[int, int], int] = {}
            for _, pid, backend, device, stats in alloc:
                b = int(stats.get("reserved") or stats.get("driver") or 0)
                last[(pid, device)] = max(last.get((pid, device), 0), b) if peak else b
            for (pid, _), b in last.items():
                out[pid] = out.get(pid, 0) + b
        return out

    def snapshot(self, roles: Mapping[int, str]) -> dict[str, Any]:
        """The chart's payload (``chart.chart_payload`` shape) with its own ``labels``."""
        with self._lock:
            rounds, alloc = list(self._rounds), list(self._alloc)
        by_role: dict[str, dict[str, list]] = {}
        free: dict[str, list] = {"t": [], "y": []}
        total: dict[str, list] = {"t": [], "y": []}
        nvml_procs = any(d.get("procs") for _, d in rounds)
        for t, d in rounds:
            devices = _tree_devices(d)
            free["t"].append(t)
            free["y"].append(sum(max(0, int(x.get("total") or 0) - int(x.get("used") or 0)) for x in devices))
            total["t"].append(t)
            total["y"].append(sum(int(x.get("total") or 0) for x in devices))
            if nvml_procs:
                _stack(by_role, t, roles, ((int(p["pid"]), int(p.get("used") or 0)) for p in d.get("procs") or []))
        allocated: dict[str, list] = {"t": [], "y": []}
        reserved: dict[str, list] = {"t": [], "y": []}
        last: dict[tuple[int, str, int], dict[str, Any]] = {}
        for t, pid, backend, device, stats in alloc:
            last[(pid, backend, device)] = stats
            allocated["t"].append(t)
            allocated["y"].append(sum(int(s.get("allocated") or 0) for s in last.values()))
            reserved["t"].append(t)
            reserved["y"].append(sum(int(s.get("reserved") or s.get("driver") or 0) for s in last.values()))
            if not nvml_procs:
                # No per-process numbers from NVML (none, or host pids in a container): what PyTorch reserved.
                per_pid: dict[int, int] = {}
                for (p, _, _), s in last.items():
                    per_pid[p] = per_pid.get(p, 0) + int(s.get("reserved") or s.get("driver") or 0)
                _stack(by_role, t, roles, per_pid.items())
        out: dict[str, Any] = {"tree_pss_by_role": {r: _thin(s) for r, s in by_role.items()}, "labels": dict(LABELS)}
        for key, s in (("main_rss", allocated), ("tree_rss", reserved), ("host_available", free), ("limit", total)):
            if s["t"]:
                out[key] = _thin(s)
        return out


def _tree_devices(d: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The devices (or MIG instances) the tree's processes are on; all of them when none is known: the free and
    total lines then describe the memory the run can use, not a sum over a machine's eight GPUs."""
    devices = d.get("devices") or []
    used = {(p.get("device"), p.get("mig")) for p in d.get("procs") or []}
    mine = [x for x in devices if (x.get("index"), x.get("mig")) in used]
    return mine or devices


def _stack(by_role: dict[str, dict[str, list]], t: float, roles: Mapping[int, str], values: Any) -> None:
    sums: dict[str, int] = {}
    for pid, b in values:
        role = roles.get(pid, "other")
        sums[role] = sums.get(role, 0) + b
    for role in set(sums) | set(by_role):
        s = by_role.setdefault(role, {"t": [], "y": []})
        s["t"].append(t)
        s["y"].append(sums.get(role, 0))


def _thin(s: dict[str, list]) -> dict[str, list]:
    n = len(s["t"])
    if n <= MAX_POINTS:
        return s
    idx = sorted({round(i * (n - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)})
    return {"t": [s["t"][i] for i in idx], "y": [s["y"][i] for i in idx]}
