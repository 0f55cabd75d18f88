"""A day-long run replayed through memscope's kernel side: the recorder, the analysis and the dashboard's data model.

    python benchmarks/dayrun.py                      # 24 h at 10 Hz, 16 processes (~2-4 min on 2 cores)
    python benchmarks/dayrun.py --hours 1            # a shorter day
    python benchmarks/dayrun.py --quick              # CI smoke: 20 min of run (< 30 s)
    python benchmarks/dayrun.py --tracemalloc        # also trace Python allocations (about 2x slower)
    python benchmarks/dayrun.py --out FILE           # also write the Markdown report to FILE
    python benchmarks/dayrun.py --keep FILE          # also keep the record (to re-measure with --record)
    python benchmarks/dayrun.py --record FILE        # only the summary and reopen, on a kept record

No process is watched: a seeded generator makes the records a real run would have made, and they go through the
same code a notebook kernel runs, in this one process:

- ``store.Recorder`` (a real SQLite file in a temporary directory, deleted at the end, downsampled as the run goes
  by the recorder's own thread as in a real run: record/buckets.py): RSS rounds at 10 Hz, PSS rounds every 2 s, a host sample every second, processes seen and exited, phase/epoch/mark events and a
  line of program output every 10 s;
- ``Snapshot.update`` (the live snapshot the status line and process table read);
- ``ui.series.RunSeries`` (fed every record, as ``RunSeries.follow`` does) and, every simulated minute, what the
  dashboard pushes: ``snapshot()`` through ``chart.chart_payload``; the points counted with ``count_points`` and
  the payload's size as JSON (what each push sends to the browser);
- every simulated 5 minutes the dashboard's live leak verdict (``fit_plan(...).verdict`` on ``RunSeries``'s
  ``tree_private``: anonymous PSS + swap at every RSS round, as ``dashboard_panels.LiveLeak`` fits it);
- at the end ``analysis.summary.summarize`` on the whole record (leak verdict, spikes, phases) and
  ``RunSeries.from_record`` (what ``memscope.reopen`` does);
- last, the leak verdict fitted on the full-resolution series (the tree's anonymous PSS + swap at every RSS round,
  written to a side file as the replay goes, not kept in memory) with the summary's plan: what the summary said
  before the record was downsampled, to compare with what it says on the downsampled record; and the summary's
  spikes found on the full-resolution fast series (the tree's PSS at every RSS round, the same side file), each
  matched to one on the record with the same start and end (within a round): count, times, heights.

The tree (16 processes at any time): a bash wrapper, the training's main process (a slow leak of 25 MB/h on a
3 GiB base, +1.5 GiB during each 5-minute validation, random spikes of 0.3-2 GiB lasting 1-8 s), 8 DataLoader
workers restarted at every epoch (every 30 min: new pids, as with persistent_workers=False), 4 compile workers
and 2 helpers.

Memory is memscope's own in this process: VmRSS/VmHWM from /proc/self/status (everything: Python objects,
SQLite's page cache, the allocator's arenas) measured before the replay (memscope imported, recorder open) and
during it; with ``--tracemalloc``, the peak of Python's traced allocations too. The generator itself keeps O(1)
state. The replay waits for the recorder every simulated minute, so the recorder's queue never holds more than a
minute of records (a live run's queue holds about 0.5 s: the figure is an upper bound).
"""

from __future__ import annotations

import argparse
import array
import bisect
import gc
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hostinfo import emit, machine_rows  # noqa: E402

from memscope.analysis import phases as phases_mod  # noqa: E402
from memscope.analysis.leak import assess_leak, fit_plan, trim_teardown  # noqa: E402
from memscope.analysis.summary import _spikes, summarize  # noqa: E402
from memscope.model import Event, HostSample, ProcessExited, ProcessSeen, ProcMem, RunEnded, TreeSample  # noqa: E402
from memscope.record.reader import RunData  # noqa: E402
from memscope.record.writer import Recorder  # noqa: E402
from memscope.session.live import Snapshot  # noqa: E402
from memscope.ui.chart import chart_payload, count_points  # noqa: E402
from memscope.ui.series import RunSeries  # noqa: E402

MiB, GiB = 2**20, 2**30
HOST_TOTAL = 64 * GiB
EPOCH_S = 1800.0  # a new set of DataLoader workers every 30 min
EVAL_S = 300.0  # the last 5 min of each epoch is validation
PUSH_EVERY_S = 60.0  # a dashboard push (snapshot -> chart payload) every simulated minute
LEAK_EVERY_S = 300.0  # the live leak verdict every simulated 5 min
SYNC_EVERY_S = 60.0  # wait for the recorder every simulated minute
MAIN_PSS = 0.85  # the main's PSS / RSS; anonymous PSS is 0.8 of PSS in every process


def vm_status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    return out


def thread_cpu(tid: int | None) -> float | None:
    """CPU seconds of one thread of this process (schedstat: nanoseconds on the CPU)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# -- the synthetic run ------------------------------------------------------------------------------------------
@dataclass
class Proc:
    pid: int
    ppid: int
    role: str
    name: str
    cmdline: str
    base: float  # bytes of RSS
    pss_frac: float  # PSS / RSS
    noise: float  # bytes (sd)


@dataclass
class Day:
    """A seeded generator of one day's records (O(1) state: nothing is kept but the live processes)."""

    seconds: float
    hz: float = 10.0
    seed: int = 0
    procs: dict[int, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.next_pid = 1000
        self.wrapper = self._spawn(1, "wrapper", "bash", "bash train.sh", 4 * MiB, 1.0, 0.0)
        self.main = self._spawn(
            self.wrapper.pid, "main", "python", "python train.py --epochs 48", 3 * GiB, MAIN_PSS, 4 * MiB
        )
        for i in range(4):
            self._spawn(
                self.main.pid,
                "compile_worker",
                "python",
                "python -m torch._inductor.compile_worker",
                300 * MiB,
                0.45,
                1 * MiB,
            )
        for i in range(2):
            self._spawn(
                self.main.pid, "helper", "python", "python -m tensorboard.summary_writer", 120 * MiB, 0.6, 0.5 * MiB
            )
        self.workers: list[Proc] = []
        self.spike_end = -1.0
        self.spike_h = 0.0
        self.spike_start = -1.0

    def _spawn(self, ppid: int, role: str, name: str, cmd: str, base: float, frac: float, noise: float) -> Proc:
        p = Proc(self.next_pid, ppid, role, name, cmd, base, frac, noise)
        self.next_pid += 1 + self.rng.randrange(3)
        self.procs[p.pid] = p
        return p

    def records(self) -> Any:
        """Yields every record in time order, and ("sync", t) / ("push", t) / ("leak", t) markers."""
        rng = self.rng
        n = int(self.seconds * self.hz)
        pss_every = int(round(2.0 * self.hz))
        host_every = int(round(self.hz))
        out_every = int(round(10 * self.hz))
        sync_every = int(round(SYNC_EVERY_S * self.hz))
        push_every = int(round(PUSH_EVERY_S * self.hz))
        leak_every = int(round(LEAK_EVERY_S * self.hz))
        for p in list(self.procs.values()):
            yield ProcessSeen(0.0, p.pid, p.ppid, p.role, p.name, p.cmdline, 1.7e9)
        yield Event(0.0, self.main.pid, "agent_hello", {"pid": self.main.pid, "argv": ["train.py"]})
        noise = [rng.gauss(0.0, 1.0) for _ in range(100_003)]
        nn, k = len(noise), 0
        epoch = -1
        mode = None
        step = 0
        for i in range(n):
            t = i / self.hz
            e = int(t // EPOCH_S)
            if e != epoch:  # a new epoch: the old workers exit, 8 new ones start
                epoch = e
                for w in self.workers:
                    del self.procs[w.pid]
                    yield ProcessExited(t, w.pid, 0, None)
                self.workers = [
                    self._spawn(
                        self.main.pid,
                        "dataloader_worker",
                        "pt_data_worker",
                        "python train.py --epochs 48",
                        650 * MiB,
                        0.3,
                        2 * MiB,
                    )
                    for _ in range(8)
                ]
                for w in self.workers:
                    yield ProcessSeen(t, w.pid, w.ppid, w.role, w.name, w.cmdline, 1.7e9 + t)
                yield Event(t, self.main.pid, "epoch", {"loader": 1, "n": e + 1, "workers": 8, "pid": self.main.pid})
            evaluating = (t % EPOCH_S) >= EPOCH_S - EVAL_S
            want = "eval" if evaluating else "train"
            if want != mode:
                mode = want
                yield Event(
                    t, self.main.pid, "phase", {"name": mode, "state": "switch", "auto": True, "pid": self.main.pid}
                )
            # Spikes: a transient allocation every ~10 min on average, 1-8 s long, ramping up and down.
            if t > self.spike_end and rng.random() < 1.0 / (600 * self.hz):
                self.spike_start, self.spike_end = t, t + rng.uniform(1, 8)
                self.spike_h = rng.uniform(0.3, 2.0) * GiB
            spike = 0.0
            if self.spike_start <= t <= self.spike_end:
                ramp = min(1.0, (t - self.spike_start) / 0.5, (self.spike_end - t) / 0.5)
                spike = self.spike_h * max(0.0, ramp)
            leak = 25 * MiB * t / 3600.0
            main_extra = leak + spike + (1.5 * GiB if evaluating else 0.0)
            pss_round = i % pss_every == 0
            rss_procs = []
            pss_procs = []
            for p in self.procs.values():
                v = p.base
                if p.noise:
                    v += p.noise * noise[k % nn]  # a precomputed N(0, 1) table: rng.gauss per value is slow
                    k += 7
                if p is self.main:
                    v += main_extra
                elif p.role == "dataloader_worker":
                    v += 40 * MiB * min(1.0, (t % EPOCH_S) / 60.0)  # workers warm up over their first minute
                rss = int(v) // 4096 * 4096
                # Every round carries the fast series, as the real sampler's do: statm's private memory (anonymous
                # resident), and PSS and anonymous PSS carried forward between PSS rounds (here: in proportion).
                pss = int(rss * p.pss_frac)
                anon = int(pss * 0.8)
                rss_procs.append(
                    ProcMem(p.pid, rss, private=int(rss * 0.8) // 4096 * 4096, est_pss=pss, est_private=anon)
                )
                if pss_round:
                    pss_procs.append(ProcMem(p.pid, rss, pss, anon, pss - anon, 0, est_pss=pss, est_private=anon))
            yield TreeSample(t, "rss", tuple(rss_procs))
            if pss_round:
                yield TreeSample(t, "pss", tuple(pss_procs))
            if i % host_every == 0:
                tree = sum(m.rss for m in rss_procs)
                avail = HOST_TOTAL - tree - 6 * GiB + int(rng.gauss(0, 50 * MiB))
                yield HostSample(t, HOST_TOTAL, avail, 8 * GiB, 0, None, None, 0, None)
            if i % out_every == 0:
                step += 1
                yield Event(
                    t,
                    self.main.pid,
                    "output",
                    {
                        "stream": "stdout",
                        "text": f"epoch {epoch} step {step * 50}: loss "
                        f"{2.3 * math.exp(-t / 40000) + 0.1:.4f} 12.3 it/s\n",
                    },
                )
            if i and i % 36000 == 0:  # hourly checkpoint mark
                yield Event(t, self.main.pid, "mark", {"text": f"checkpoint {int(t // 3600)}", "pid": self.main.pid})
            done = (i + 1) / self.hz  # simulated time covered so far
            if i % sync_every == sync_every - 1:
                yield ("sync", done)
            if i % push_every == push_every - 1:
                yield ("push", done)
            if i % leak_every == leak_every - 1:
                yield ("leak", done)
        t = n / self.hz
        for p in list(self.procs.values()):
            yield ProcessExited(t, p.pid, 0 if p.role != "wrapper" else 0, None)
        yield Event(
            t,
            self.wrapper.pid,
            "exit_status",
            {"returncode": 0, "maxrss_bytes": int(4.6 * GiB), "stop_requested": None, "detached": False},
        )


# -- the replay -------------------------------------------------------------------------------------------------
@dataclass
class Result:
    hours: float
    hz: float
    rounds: int = 0
    pss_rounds: int = 0
    records: int = 0
    pids: int = 0
    replay_s: float = 0.0
    cpu_s: float = 0.0
    feed_s: float = 0.0  # wall time inside Recorder.put + the snapshot + RunSeries.feed
    writer_cpu_s: float | None = None  # the recorder's writer thread (SQLite inserts, commits)
    rss_before: int = 0
    rss_after_replay: int = 0
    hwm_replay: int = 0
    hwm_reset: bool = False
    rss_by_hour: list[tuple[float, int]] = field(default_factory=list)
    db_by_hour: list[tuple[float, int]] = field(default_factory=list)  # the record's size (file + WAL)
    traced_peak: int | None = None
    traced_end: int | None = None
    pushes: int = 0
    points_max: int = 0
    points_last: int = 0
    payload_bytes_max: int = 0
    push_ms: list[float] = field(default_factory=list)
    leak_ms: list[float] = field(default_factory=list)
    live_leak: str = ""
    db_bytes: int = 0
    wal_bytes_max: int = 0
    sample_rows: int = 0
    summarize_s: float = 0.0
    summarize_cpu_s: float = 0.0
    summarize_hwm: int = 0
    summary_leak: dict = field(default_factory=dict)
    summary_spikes: int = 0
    summary_phases: int = 0
    reopen_s: float = 0.0
    reopen_cpu_s: float = 0.0
    reopen_hwm: int = 0
    reopen_points: int = 0
    recorder_errors: int = 0
    full_leak: dict = field(default_factory=dict)  # the verdict on the full-resolution series
    full_points: int = 0
    spikes: list = field(default_factory=list)  # the summary's spikes on the record
    full_spikes: list = field(default_factory=list)  # the same on the full-resolution series


def replay(hours: float, hz: float, workdir: str, trace: bool, say: Callable[[str], None]) -> Result:
    res = Result(hours, hz)
    path = os.path.join(workdir, "day.sqlite")
    day = Day(hours * 3600.0, hz)
    rec = Recorder(path)
    rec.begin(
        "day-replay",
        ["bash", "train.sh"],
        workdir,
        "2026-01-01T00:00:00+0000",
        1.7e9,
        day.wrapper.pid,
        {"attached": False, "script": None, "agent": True, "interval_s": 1 / hz, "pss_interval_s": 2.0},
    )
    series = RunSeries()
    phase_events: list[dict] = []
    # The live snapshot a Run folds each record into (Snapshot.update), with the root's pid (kept whatever exits).
    snapshot, root_pid = Snapshot(), day.wrapper.pid
    gc.collect()
    if trace:
        tracemalloc.start()
    res.hwm_reset = reset_hwm()
    res.rss_before = vm_status()["VmRSS"]
    pids: set[int] = set()

    def sync() -> None:
        rec.sync(60)

    perf = time.perf_counter
    feed_s = 0.0
    writer_tid = rec._thread.native_id
    writer0 = thread_cpu(writer_tid)
    c0, w0 = time.process_time(), time.perf_counter()
    next_report = 3600.0
    # The full-resolution fitted series (t, tree anonymous PSS + swap per RSS round) goes to a side file.
    full_path = os.path.join(workdir, "full.bin")
    full_f = open(full_path, "wb")
    full_buf = array.array("d")
    for r in day.records():
        if type(r) is tuple:
            what, t = r
            if what == "sync":
                full_buf.tofile(full_f)
                del full_buf[:]
                sync()
                wal = path + "-wal"
                if os.path.exists(wal):
                    res.wal_bytes_max = max(res.wal_bytes_max, os.path.getsize(wal))
                if t + 1e-9 >= next_report:
                    res.rss_by_hour.append((t / 3600.0, vm_status()["VmRSS"]))
                    res.db_by_hour.append(
                        (t / 3600.0, sum(os.path.getsize(p) for p in (path, wal) if os.path.exists(p)))
                    )
                    say(
                        f"  {t / 3600:5.1f} h replayed in {time.perf_counter() - w0:6.1f} s, "
                        f"RSS {res.rss_by_hour[-1][1] / MiB:.0f} MiB"
                    )
                    next_report += 3600.0
            elif what == "push":
                a = time.perf_counter()
                payload = chart_payload(series.snapshot())
                body = json.dumps(payload)
                res.push_ms.append((time.perf_counter() - a) * 1e3)
                res.pushes += 1
                n = count_points(payload)
                res.points_max = max(res.points_max, n)
                res.points_last = n
                res.payload_bytes_max = max(res.payload_bytes_max, len(body))
                del payload, body
            elif what == "leak":
                a = time.perf_counter()
                # As dashboard_panels.LiveLeak: the tree's private memory (anonymous PSS + swap) at every RSS round,
                # fitted by the plan every view shares (from the first epoch, the floor split by phase).
                with series._lock:
                    pt, py_ = series.tree_private.points()
                v = fit_plan(sorted(phase_events, key=lambda e: e["t"]), pt[-1], day.main.pid).verdict(
                    pt, py_, HOST_TOTAL
                )
                res.leak_ms.append((time.perf_counter() - a) * 1e3)
                res.live_leak = v.verdict
            continue
        res.records += 1
        if type(r) is TreeSample:
            if r.kind == "rss":
                res.rounds += 1
                full_buf.append(r.t)
                full_buf.append(sum(p.est_private or 0 for p in r.procs))
                full_buf.append(sum(p.est_pss or 0 for p in r.procs))
            else:
                res.pss_rounds += 1
        elif type(r) is ProcessSeen:
            pids.add(r.pid)
        a = perf()
        rec.put(r)
        snapshot.update(r, root_pid)
        series.feed(r)
        if type(r) is Event and r.kind in ("phase", "epoch"):  # what Dashboard._on_record keeps
            phase_events.append({"t": r.t, "pid": r.pid, "kind": r.kind, "data": r.data})
        feed_s += perf() - a
    full_buf.tofile(full_f)
    full_f.close()
    del full_buf
    sync()
    res.replay_s = time.perf_counter() - w0
    res.cpu_s = time.process_time() - c0
    res.feed_s = feed_s
    w1 = thread_cpu(writer_tid)
    res.writer_cpu_s = w1 - writer0 if w1 is not None and writer0 is not None else None
    st = vm_status()
    res.rss_after_replay, res.hwm_replay = st["VmRSS"], st["VmHWM"]
    if trace:
        res.traced_end, res.traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    res.pids = len(pids)
    say(f"replayed {res.rounds} rounds in {res.replay_s:.1f} s; summarizing the record...")

    # The end of the run: the summary from the record (what session/finish.py does), then the recorder closes.
    summary = measure_summary(path, res)
    rec.put(RunEnded(res.hours * 3600.0, summary))
    series.feed(RunEnded(res.hours * 3600.0, summary))
    rec.close(timeout=120)
    res.recorder_errors = rec.errors
    res.db_bytes = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    del series, snapshot, summary, phase_events
    gc.collect()
    say("reopening the record (RunSeries.from_record)...")
    measure_reopen(path, res)
    say("fitting the full-resolution series...")
    full_fit(path, full_path, res, day.main.pid)
    return res


def measure_summary(path: str, res: Result) -> dict:
    """``summarize`` on the record, timed, its peak memory (VmHWM reset first)."""
    gc.collect()
    reset_hwm()
    a, c = time.perf_counter(), time.process_time()
    rd = RunData(path)
    try:
        summary = summarize(rd)
    finally:
        rd.close()
    res.summarize_s = time.perf_counter() - a
    res.summarize_cpu_s = time.process_time() - c
    rd = RunData(path)
    try:
        res.sample_rows = rd.con.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    finally:
        rd.close()
    res.summarize_hwm = vm_status()["VmHWM"]
    res.summary_leak = {k: summary["leak"].get(k) for k in ("verdict", "slope_bytes_per_s", "confidence", "series")}
    res.spikes = list(summary.get("spikes") or [])
    res.summary_spikes = len(res.spikes)
    res.summary_phases = len(summary.get("phases") or [])
    return summary


def measure_reopen(path: str, res: Result) -> None:
    """``RunSeries.from_record`` (what ``memscope.reopen`` does), timed, its peak memory."""
    gc.collect()
    reset_hwm()
    a, c = time.perf_counter(), time.process_time()
    rs = RunSeries.from_record(path)
    res.reopen_s = time.perf_counter() - a
    res.reopen_cpu_s = time.process_time() - c
    res.reopen_hwm = vm_status()["VmHWM"]
    res.reopen_points = count_points(chart_payload(rs.snapshot()))


def full_fit(path: str, full_path: str, res: Result, main_pid: int) -> None:
    """The summary's leak fit (diagnosis: the same plan, teardown trimmed) on the full-resolution series."""
    buf = array.array("d")
    with open(full_path, "rb") as f:
        buf.frombytes(f.read())
    t, y, pss = buf[0::3].tolist(), buf[1::3].tolist(), buf[2::3].tolist()
    del buf
    rd = RunData(path)
    try:
        events = sorted(rd.events("epoch") + rd.events("phase"), key=lambda e: e["t"])
        spans = phases_mod.intervals(rd.events("phase"), res.hours * 3600.0, main_pid)
    finally:
        rd.close()
    plan = fit_plan(events, res.hours * 3600.0, main_pid, ended=True)
    v = assess_leak(*plan.span(t, y), phases=plan.phases)
    res.full_points = len(t)
    res.full_leak = {"verdict": v.verdict, "slope_bytes_per_s": v.slope_bytes_per_s, "confidence": v.confidence}
    # The summary's spikes (as diagnosis finds them: teardown trimmed, labelled by phase) on the full-resolution
    # fast series (the tree's PSS at every RSS round).
    t, pss = trim_teardown(t, pss)
    res.full_spikes = _spikes(t, pss, spans, list(plan.phases))


# -- the report -------------------------------------------------------------------------------------------------
def machine() -> list[tuple[str, str]]:
    return machine_rows(("SQLite", __import__("sqlite3").sqlite_version))


def _mib(x: int | None) -> str:
    return "—" if x is None else f"{x / MiB:.1f} MiB"


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "—" if x is None else fmt.format(x)


def _med(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if s else float("nan")


def _full_row(r: Result) -> str:
    a, b = r.summary_leak.get("slope_bytes_per_s"), r.full_leak.get("slope_bytes_per_s")
    if not r.full_leak or a is None or not b:
        return "| leak fit at full resolution | — |"
    return (
        f"| leak fit at full resolution (the same plan on all {r.full_points:,} RSS rounds) | verdict "
        f"{r.full_leak['verdict']}, slope {b * 3600 / MiB:.2f} MiB/h (confidence {r.full_leak['confidence']:.4f}); "
        f"the summary's on the record: {r.summary_leak.get('verdict')}, {a * 3600 / MiB:.2f} MiB/h: "
        f"**{100 * (a - b) / b:+.2f} %** |"
    )


def spike_match(full: list[dict], got: list[dict], tol_s: float) -> dict[str, Any]:
    """The record's spikes against the full-resolution ones: how many of these have one on the record that starts
    and ends within ``tol_s`` (a round), and the largest differences in start, end and height among those."""
    starts = sorted((s["start_s"], i) for i, s in enumerate(got))
    keys = [a for a, _ in starts]
    matched, d_start, d_end, d_h = 0, 0.0, 0.0, 0.0
    for f in full:
        j = bisect.bisect_left(keys, f["start_s"] - tol_s)
        if j < len(keys) and keys[j] <= f["start_s"] + tol_s:
            g = got[starts[j][1]]
            if abs(g["end_s"] - f["end_s"]) <= tol_s:
                matched += 1
                d_start = max(d_start, abs(g["start_s"] - f["start_s"]))
                d_end = max(d_end, abs(g["end_s"] - f["end_s"]))
                d_h = max(d_h, abs(g["height_bytes"] - f["height_bytes"]) / max(1, f["height_bytes"]))
    return {"full": len(full), "record": len(got), "matched": matched, "d_start": d_start, "d_end": d_end, "d_h": d_h}


def _spike_row(r: Result) -> str:
    if not r.full_points:
        return "| spikes at full resolution | — |"
    m = spike_match(r.full_spikes, r.spikes, 1.0 / r.hz + 1e-6)
    return (
        f"| spikes at full resolution (the summary's find_spikes on all {r.full_points:,} RSS rounds) | "
        f"**{m['full']} at full resolution, {m['record']} on the record**; {m['matched']} of them with the same "
        f"start and end (within a round) on the record: largest differences start {m['d_start']:.2f} s, end "
        f"{m['d_end']:.2f} s, height {100 * m['d_h']:.2f} % |"
    )


def report(r: Result, load_end: tuple[float, float, float]) -> str:
    sim_s = r.hours * 3600.0
    growth = r.hwm_replay - r.rss_before
    lines = ["# memscope on a day-long run (replayed)", "", "| machine | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in machine()]
    lines += [f"| load average at end | {' '.join(f'{x:.2f}' for x in load_end)} |", ""]
    lines += [
        "| the run | |",
        "|---|---|",
        f"| simulated | {r.hours:.3g} h at {r.hz:g} Hz: {r.rounds:,} RSS rounds, {r.pss_rounds:,} PSS rounds "
        f"(every 2 s), 16 processes at a time, {r.pids} pids in all (DataLoader workers restart every "
        f"30 min) |",
        f"| records through the recorder | {r.records:,} ({r.sample_rows:,} sample rows) |",
        "",
    ]
    per_h = r.db_bytes / r.hours if r.hours else 0
    hwm = "VmHWM" if r.hwm_reset else "VmHWM (could not be reset: peak since process start)"
    lines += [
        "| result | |",
        "|---|---|",
        f"| **memscope's own memory** (RSS of this process) | before the replay {_mib(r.rss_before)}; "
        f"**peak during it {_mib(r.hwm_replay)}** ({hwm}); at the end {_mib(r.rss_after_replay)}; "
        f"**growth {_mib(growth)}** |",
    ]
    if r.rss_by_hour:
        marks = [x for x in r.rss_by_hour if abs(x[0] - round(x[0])) < 1e-6]
        step = max(1, len(marks) // 6)
        lines.append("| RSS by the hour | " + ", ".join(f"{h:g} h {v / MiB:.0f} MiB" for h, v in marks[::step]) + " |")
    if r.db_by_hour:
        marks = [x for x in r.db_by_hour if abs(x[0] - round(x[0])) < 1e-6]
        step = max(1, len(marks) // 6)
        half = [x for x in marks if x[0] >= marks[-1][0] / 2]
        rate = (half[-1][1] - half[0][1]) / (half[-1][0] - half[0][0]) if len(half) >= 2 else None
        lines.append(
            "| record size by the hour | "
            + ", ".join(f"{h:g} h {v / MiB:.1f} MiB" for h, v in marks[::step])
            + (f"; **{rate / MiB:.2f} MiB per hour** over the second half" if rate is not None else "")
            + " |"
        )
    if r.traced_peak is not None:
        lines.append(
            f"| Python allocations (tracemalloc) | peak {_mib(r.traced_peak)}, at the end {_mib(r.traced_end)} |"
        )
    lines += [
        f"| **points sent to the browser** per push | **max {r.points_max:,}**, at the end {r.points_last:,} "
        f"(all lines together; {r.pushes:,} pushes, one per simulated minute) |",
        f"| a push's payload (JSON) | max {r.payload_bytes_max / 1024:.0f} KiB; snapshot + payload + JSON "
        f"{_med(r.push_ms):.1f} ms median, {max(r.push_ms or [0]):.1f} ms max |",
        f"| live leak verdict (dashboard, every 5 s in a real run) | {_med(r.leak_ms):.1f} ms median, "
        f"{max(r.leak_ms or [0]):.1f} ms max; last verdict {r.live_leak} |",
        f"| **record size on disk** | {r.db_bytes / MiB:.0f} MiB in all, **{per_h / MiB:.1f} MiB per hour** "
        f"(WAL at most {r.wal_bytes_max / MiB:.1f} MiB while written) |",
        f"| replay time | {r.replay_s:.1f} s wall, {r.cpu_s:.1f} s CPU: {sim_s / r.replay_s:,.0f}x real time "
        f"({r.rounds / r.replay_s:,.0f} rounds/s; a live run makes {r.hz:g} rounds/s). memscope's share: "
        f"{r.feed_s:.1f} s in Recorder.put + snapshot + RunSeries.feed "
        f"({1e6 * r.feed_s / max(r.rounds, 1):.0f} µs a round) and "
        f"{_f(r.writer_cpu_s)} s CPU in the recorder's writer thread "
        f"({_f(None if r.writer_cpu_s is None else 1e6 * r.writer_cpu_s / max(r.rounds, 1), '{:.0f}')} µs "
        f"a round); the rest is generating the records and waiting for the commits |",
        f"| memscope's kernel-side CPU at {r.hz:g} Hz, from these | "
        f"{_f(None if r.writer_cpu_s is None else 100 * r.hz * (r.feed_s + r.writer_cpu_s) / max(r.rounds, 1), '{:.2f}')} "
        f"% of one core (feeding + writing, per round x {r.hz:g} rounds/s; pushes and the leak verdict "
        f"not included) |",
        f"| summary at the end (summarize: leak, spikes, phases) | {r.summarize_s:.2f} s ({r.summarize_cpu_s:.2f} s "
        f"CPU), peak RSS "
        f"{_mib(r.summarize_hwm)}; leak verdict {r.summary_leak.get('verdict')} (slope "
        f"{(r.summary_leak.get('slope_bytes_per_s') or 0) * 3600 / MiB:.1f} MiB/h of "
        f"{r.summary_leak.get('series')}; truth: 25 MiB/h of the main's RSS, i.e. {25 * MAIN_PSS * 0.8:.1f} "
        f"MiB/h of its private PSS, {25 * MAIN_PSS:.1f} of its PSS), "
        f"{r.summary_spikes} spikes, {r.summary_phases} phases |",
        _full_row(r),
        _spike_row(r),
        f"| reopen (RunSeries.from_record) | {r.reopen_s:.2f} s ({r.reopen_cpu_s:.2f} s CPU), peak RSS {_mib(r.reopen_hwm)}, "
        f"{r.reopen_points:,} points |",
        f"| recorder errors | {r.recorder_errors} |",
        "",
    ]
    lines.append(
        "Memory is this whole process (Python, memscope, SQLite) as /proc/self/status shows it; the "
        "process imports no notebook package, so a kernel adds ipywidgets/bokeh's import cost on top "
        "(see the start-up benchmark). The replay waits for the recorder every simulated minute."
    )
    return "\n".join(lines) + "\n"


def remeasure(path: str, out: str | None) -> int:
    """The summary and reopen on a record kept by ``--keep`` (a copy: reading never changes the record)."""
    if not os.path.isfile(path):
        print(f"dayrun: no such record: {path}", file=sys.stderr)
        return 2
    res = Result(0.0, 0.0)
    rd = RunData(path)
    try:
        meta = rd.run_row()["meta"]
        res.hours = (rd.last_sample_t() or 0.0) / 3600.0
        res.hz = 1.0 / meta.get("interval_s", 1.0)
    finally:
        rd.close()
    measure_summary(path, res)
    measure_reopen(path, res)
    res.db_bytes = os.path.getsize(path)
    lines = [
        f"| record | {res.db_bytes / MiB:.1f} MiB, {res.sample_rows:,} sample rows ({res.hours:.3g} h at {res.hz:g} Hz) |",
        f"| summary at the end | {res.summarize_s:.2f} s ({res.summarize_cpu_s:.2f} s CPU), peak RSS {_mib(res.summarize_hwm)}; leak "
        f"{res.summary_leak.get('verdict')} {(res.summary_leak.get('slope_bytes_per_s') or 0) * 3600 / MiB:.2f} "
        f"MiB/h; {res.summary_spikes} spikes, {res.summary_phases} phases |",
        f"| reopen | {res.reopen_s:.2f} s ({res.reopen_cpu_s:.2f} s CPU), peak RSS {_mib(res.reopen_hwm)}, {res.reopen_points:,} points |",
    ]
    emit("| on a kept record | |\n|---|---|\n" + "\n".join(lines) + "\n", out)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=24.0, help="simulated hours (24)")
    ap.add_argument("--hz", type=float, default=10.0, help="RSS rounds per second (10)")
    ap.add_argument("--quick", action="store_true", help="20 simulated minutes: a CI smoke test")
    ap.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations (slower)")
    ap.add_argument("--dir", help="where to write the record (a temporary directory, deleted at the end)")
    ap.add_argument("--out", metavar="FILE", help="also write the Markdown report here")
    ap.add_argument("--keep", metavar="FILE", help="copy the record here at the end")
    ap.add_argument("--record", metavar="FILE", help="only measure summarize and reopen on this kept record")
    ns = ap.parse_args(argv)
    if ns.record:
        return remeasure(ns.record, ns.out)
    hours = 1 / 3 if ns.quick else ns.hours

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    work = tempfile.mkdtemp(prefix="memscope-dayrun-", dir=ns.dir)
    try:
        res = replay(hours, ns.hz, work, ns.tracemalloc, say)
        if ns.keep:
            shutil.copyfile(os.path.join(work, "day.sqlite"), ns.keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(res, os.getloadavg())
    emit(text, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
