"""The typed records every part of memscope speaks.

Collectors produce them, the Recorder stores them, views and analysis consume them. Times are seconds since
the run started (``t``), memory is bytes. Records are immutable so they can be shared across threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict, Union

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
# What the memory is doing, one label value per run and rank (1 for the current kind): the verdict's growth kind.
METRIC_GROWTH = "memscope_growth_info"

# The verdict's growth kinds (summary ``leak.growth``, the card, the dashboard, the Prometheus label):
# flat; spikes (excursions over a flat floor); step (a one-time rise that then holds); leak (sustained growth of
# some process's own memory, linear or a staircase); copy_on_read (DataLoader workers un-sharing their parent's
# pages: bounded); more_processes (the floor rose only because more processes were alive).
GROWTH_KINDS = ("flat", "spikes", "step", "leak", "copy_on_read", "more_processes")


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
    est_pss: int | None = None  # PSS now: measured in a PSS round, carried forward in RSS rounds
    est_private: int | None = None  # anonymous PSS + swap now, likewise: what a leak grows


@dataclass(frozen=True)
class TreeSample:
    """A sampling round over the whole tree. ``kind`` is "rss" (cheap, frequent) or "pss" (smaps_rollup)."""

    t: float
    kind: str
    procs: tuple[ProcMem, ...]

    @property
    def rss_total(self) -> int:
        """The tree's RSS in this round."""
        return sum(p.rss for p in self.procs)

    @property
    def pss_total(self) -> int | None:
        """The tree's measured PSS in this round (None in RSS rounds)."""
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
        """The tree's private memory (anonymous PSS + swap) at this round's moment, None for old-style rounds."""
        if not self.procs or any(p.est_private is None for p in self.procs):
            return None
        return sum(p.est_private for p in self.procs)  # type: ignore[misc]


@dataclass(frozen=True)
class HostSample:
    """The host's memory and the run's cgroup at one moment."""

    t: float
    total: int
    available: int
    swap_total: int
    swap_used: int
    limit: int | None  # the smallest memory limit that applies to the run (cgroup), None if none
    cgroup_usage: int | None
    host_oom_kills: int | None  # /proc/vmstat oom_kill (cumulative)
    cgroup_oom_kills: int | None  # memory.events oom_kill / memory.oom_control oom_kill (cumulative)


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
    """A process of the tree ended."""

    t: float
    pid: int
    exit_code: int | None  # None when the status could not be observed (not our child, reaped by another)
    exit_signal: str | None  # "SIGSEGV", ...


@dataclass(frozen=True)
class Event:
    """Anything else: agent hello, exception, fault, stop request, output marks. ``data`` is JSON-able."""

    t: float
    pid: int | None
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunEnded:
    """The run ended; ``summary`` is its summary."""

    t: float
    summary: Summary


Record = Union[TreeSample, HostSample, ProcessSeen, ProcessExited, Event, RunEnded]


# -- the summary (schema "memscope.summary/1"): what summarize() returns, Run.wait() gives and --summary-json writes.
# Typed here, once, for readers of the code; the JSON itself is unchanged. Sections that are long lists of rows
# (processes' rows excepted) stay ``dict[str, Any]``: their fields are documented where they are made.
SUMMARY_SCHEMA = "memscope.summary/1"


class ExitInfo(TypedDict):
    """Why the run ended (analysis/exit_cause.py): the cause, the status, and one message for a person."""

    cause: str  # ok | exception | cuda_oom | oom_kill | killed | segfault | abort | bus_error |
    # worker_crash | stopped_by_user | exit_nonzero | unknown | running | detached
    code: int | None
    signal: str | None
    pid: int | None
    message: str
    traceback: str | None


class Peak(TypedDict):
    """The tree's peak: PSS at the RSS rate (a spike between PSS rounds is seen), RSS, and when."""

    tree_pss_bytes: int | None
    tree_rss_bytes: int
    at_s: float
    tree_pss_measured_bytes: int | None


class Limit(TypedDict):
    """The limit the run is compared against and where it came from ("flag", "cgroup" or "host")."""

    bytes: int
    source: str


class ProcessRow(TypedDict):
    """One process of the tree in the summary."""

    pid: int
    ppid: int
    role: str
    cmdline: str
    peak_rss_bytes: int
    peak_pss_bytes: int | None
    exit_code: int | None
    exit_signal: str | None
    end: str | None


class GrowthInfo(TypedDict, total=False):
    """What the memory is doing (analysis/growth.py): one of GROWTH_KINDS, its words, and the figures they say."""

    kind: str  # one of GROWTH_KINDS
    words: str  # the kind in one line, as the card and the dashboard say it
    where: list[str]  # leak: the leaking parts (roles), main first
    rate_bytes_per_s: float  # leak: its pace
    rise_bytes: int  # step / more_processes: how much the floor rose
    rise_s: float  # step: over how many seconds, where it rose gradually (a cache filling)
    step_name: str  # a staircase: "evaluation" or "epoch"
    steps: int  # ... how many
    per_step_bytes: int  # ... what each kept
    spike_bytes: int  # the highest excursion above the floor, where material
    processes_before: int  # more_processes: alive at the floor's start
    processes_after: int  # ... and at its end
    bound_bytes: int  # copy_on_read: where the tree levels off
    workers: int  # copy_on_read: the workers that copy ...
    each_bytes: int  # ... what each copied so far
    attribute: str  # ... the Dataset attribute they read, where the workers named it


class LiveInfo(TypedDict, total=False):
    """The live verdict's last answer before the end (session/verdict.py), where the run had one."""

    verdict: str
    kind: str | None
    words: str
    t_s: float
    changes: int  # how many times its answer changed during the run


class LeakInfo(TypedDict, total=False):
    """The leak verdict (analysis/leak.py's LeakVerdict as a dict), per role too."""

    verdict: str  # leak | no_leak | insufficient_data
    slope_bytes_per_s: float | None
    baseline_start_bytes: int | None
    baseline_end_bytes: int | None
    confidence: float | None
    time_to_limit_s: float | None
    reason: str | None
    pace: str | None
    series: str
    by_role: dict[str, dict[str, Any]]
    main_private: dict[str, Any]
    advice: str | None
    parts: str | None  # "processes" / "parts": the verdict is its parts' (analysis/leak.reconcile)
    per_process: dict[str, dict[str, Any]]  # each role's per-process floor's verdict; "main": its own memory
    # What the memory is doing (analysis/growth.py); None while the verdict is insufficient_data. Records written
    # before memscope named the kinds have no such key: views say so, never guess.
    growth: GrowthInfo | None
    live: LiveInfo  # the live line's last answer, where it differed from this one: what changed it is said


class CopyOnReadInfo(TypedDict, total=False):
    """DataLoader copy-on-read (analysis/copy_on_read.py): forked workers copying their parent's pages as they read
    its Python objects, their RSS flat. ``workers``: a row per worker measured (``copy_on_read`` marks those that
    copy: pid, parent, since_s, at_s, rss_bytes, rss_change_bytes, anon_rss_bytes, anon_rss_change_bytes,
    pss_start_bytes, pss_bytes, copied_bytes, shared_start_bytes, shared_bytes, shareable_bytes, levelled); ``parent``: the
    parent's PSS and anon RSS over the growth; ``attribute``: the Dataset attribute holding the most Python objects
    (name, type, len, item_type, objects, bytes, text, pid), from the workers' own ``dataset_objects`` reports;
    ``bound_bytes``: where the tree levels off."""

    detected: bool
    workers: list[dict[str, Any]]
    parent: dict[str, Any] | None
    since_s: float | None
    at_s: float | None
    tree_start_bytes: int | None
    tree_bytes: int | None
    copied_bytes: int
    bound_bytes: int | None
    levelled: bool  # every copying worker's copy stopped rising: the tree is at its bound
    attribute: dict[str, Any] | None
    attributes: list[dict[str, Any]]
    reason: str
    text: str | None
    advice: str | None


class CudaOomInfo(TypedDict, total=False):
    """A CUDA OOM a process of the tree raised (analysis/gpu.cuda_oom): PyTorch's message completed by the
    allocator's OOM observer. ``capacity_bytes`` is the device's; ``allowed_bytes`` the process's own cap where it
    had one (torch.cuda.set_per_process_memory_fraction; records summarized before it have no such key).
    ``processes``: each process on the device the message lists (pid, used_bytes, in_tree, role, this_process);
    ``host_pids``: no pid of the message is the run's (a container: NVML names host pids)."""

    pid: int
    role: str | None
    form: str | None  # the message's wording: "2.1+" or "older"
    device: int | None
    tried_bytes: int | None
    capacity_bytes: int | None
    allowed_bytes: int | None
    free_bytes: int | None
    allocated_bytes: int | None
    reserved_bytes: int | None
    reserved_unallocated_bytes: int | None
    processes: list[dict[str, Any]]
    snapshot: str | None  # the snapshot saved at the OOM, beside the record
    host_pids: bool
    advice: str | None


class AdviceLine(TypedDict):
    """One line of advice and what it is about."""

    topic: str
    text: str


class LastWords(TypedDict, total=False):
    """The last stacks before a kill or crash (oom_kill, killed, worker_crash, cuda_oom), in one sentence."""

    capture: str | None  # the capture's id in ``stacks``; None: there is none, and ``text`` says why
    t_s: float
    reason: str  # request | near_limit | stall
    text: str  # "3.1 s before the kill, at 96 % of the 2.00 GiB limit, the main process was in train.py:142 ..."


class Summary(TypedDict, total=False):
    """A run's summary. Keys are added, never renamed: records written by older memscope read with this."""

    schema: str
    run_id: str
    command: list[str]
    started_at: str
    duration_s: float
    exit: ExitInfo
    peak: Peak
    limit_bytes: int | None
    limit: Limit | None
    processes: list[ProcessRow]
    warnings: list[str]
    record: str
    phases: list[dict[str, Any]]
    marks: list[dict[str, Any]]
    leak: LeakInfo
    spikes: list[dict[str, Any]]
    workers: dict[str, Any] | None
    copy_on_read: CopyOnReadInfo  # records summarized before it have none
    allocator: dict[str, Any] | None
    gpu: dict[str, Any] | None
    compile_pool: dict[str, Any] | None
    cuda_oom: CudaOomInfo | None
    loads: list[dict[str, Any]]
    faiss: dict[str, Any]
    malloc: dict[str, Any]
    census: list[dict[str, Any]]
    scalene: list[dict[str, Any]]
    advice: list[AdviceLine]
    record_errors: dict[str, Any]
    unavailable: dict[str, str]  # a section whose data broke it (left empty) -> why
    stacks: list[dict[str, Any]]  # every capture of the tree's stacks (analysis/stacks.compact), in time order
    last_words: LastWords | None  # a run killed or crashed: its last capture before the end, or why none
    bounded: dict[str, Any]  # what memscope's own bounds kept out: output past its cap, phases coalesced, floods
