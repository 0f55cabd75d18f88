"""The typed records every part of memscope speaks.

Collectors produce them, the Recorder stores them, views and analysis consume them. Times are seconds since
the run started (``t``), memory is bytes. Records are immutable so they can be shared across threads.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

ROLES = ("main", "wrapper", "dataloader_worker", "compile_worker", "rank", "helper", "other")

# The record's ``samples.kind`` column: RSS rounds (statm, frequent) and PSS rounds (smaps_rollup).
KIND_RSS, KIND_PSS = 0, 1

# Prometheus metric families: written by export/prometheus.py, read back by record/cluster.py (one spelling).
METRIC_MEMORY = "memscope_memory_bytes"
METRIC_PROCESSES = "memscope_processes"
METRIC_HOST_AVAILABLE = "memscope_host_available_bytes"
METRIC_LIMIT = "memscope_limit_bytes"
METRIC_LEAK_SLOPE = "memscope_leak_slope_bytes_per_second"
METRIC_GPU_MEMORY = "memscope_gpu_memory_bytes"
METRIC_RUN_INFO = "memscope_run_info"
METRIC_EXIT_INFO = "memscope_exit_info"


@dataclass(frozen=True)
class ProcMem:
    """One process in one sampling round. PSS-family fields (pss, anon, file, swap) are measured in PSS rounds
    only; ``private`` (statm's resident - shared: the process's anonymous resident memory) is read every round,
    and ``est_pss`` / ``est_private`` carry the last PSS reading forward by the change of ``private`` since then
    (``collect/estimate.py``), so that every round has a tree total that adds up over a forked tree."""
    pid: int
    rss: int
    pss: int | None = None
    anon: int | None = None
    file: int | None = None
    swap: int | None = None
    private: int | None = None
    est_pss: int | None = None       # PSS now: measured in a PSS round, carried forward in RSS rounds
    est_private: int | None = None   # anonymous PSS + swap now, likewise: what a leak grows


@dataclass(frozen=True)
class TreeSample:
    """A sampling round over the whole tree. ``kind`` is "rss" (cheap, frequent) or "pss" (smaps_rollup)."""
    t: float
    kind: str
    procs: tuple[ProcMem, ...]

    @property
    def rss_total(self) -> int:
        return sum(p.rss for p in self.procs)

    @property
    def pss_total(self) -> int | None:
        if not self.procs or any(p.pss is None for p in self.procs):
            return None
        return sum(p.pss for p in self.procs)  # type: ignore[misc]

    @property
    def est_total(self) -> int | None:
        """The tree's PSS at this round's moment (measured or carried forward); None for old-style rounds."""
        if not self.procs or any(p.est_pss is None for p in self.procs):
            return None
        return sum(p.est_pss for p in self.procs)  # type: ignore[misc]

    @property
    def est_private_total(self) -> int | None:
        if not self.procs or any(p.est_private is None for p in self.procs):
            return None
        return sum(p.est_private for p in self.procs)  # type: ignore[misc]


@dataclass(frozen=True)
class HostSample:
    t: float
    total: int
    available: int
    swap_total: int
    swap_used: int
    limit: int | None            # the smallest memory limit that applies to the run (cgroup), None if none
    cgroup_usage: int | None
    host_oom_kills: int | None   # /proc/vmstat oom_kill (cumulative)
    cgroup_oom_kills: int | None # memory.events oom_kill / memory.oom_control oom_kill (cumulative)


@dataclass(frozen=True)
class ProcessSeen:
    """A process joined the tree (or its role became known)."""
    t: float
    pid: int
    ppid: int
    role: str
    name: str
    cmdline: str
    create_time: float


@dataclass(frozen=True)
class ProcessExited:
    t: float
    pid: int
    exit_code: int | None     # None when the status could not be observed (not our child, reaped by another)
    exit_signal: str | None   # "SIGSEGV", ...


@dataclass(frozen=True)
class Event:
    """Anything else: agent hello, exception, fault, stop request, output marks. ``data`` is JSON-able."""
    t: float
    pid: int | None
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunEnded:
    t: float
    summary: dict[str, Any]


Record = Union[TreeSample, HostSample, ProcessSeen, ProcessExited, Event, RunEnded]
