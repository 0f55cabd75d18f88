"""The record's downsampling (record/buckets.py): a long run's record stays small, every peak exact, and a record
read or killed at any moment opens. Real SQLite files, real writer threads, a real killed process."""

import json
import os
import random
import signal
import sqlite3
import subprocess
import textwrap
import time

from conftest import PY

from memscope.analysis.summary import summarize
from memscope.model import KIND_PSS, KIND_RSS, Event, ProcessSeen, ProcMem, TreeSample
from memscope.record import buckets
from memscope.record.reader import RunData
from memscope.record.writer import Recorder

# Small tiers so that a synthetic hour goes through all of them: full for 60 s, then 5 s buckets, 60 s past 5 min.
TIERS = ((60.0, 5.0), (300.0, 60.0))
MiB = 2**20


def _round(i: int, hz: float, pids: list[int]) -> tuple[TreeSample, TreeSample | None]:
    """A deterministic round: a slow leak in the first pid, a wobble in all, a spike in one process now and then."""
    t = i / hz
    procs, pss_procs = [], []
    for k, pid in enumerate(pids):
        rss = (100 + 10 * k) * MiB + ((i * 7919 + k * 104729) % 97) * 4096 + (i * 16384 if k == 0 else 0)
        if i % 997 == 13 * k + 5:  # a one-round spike of this process alone (its own peak, not the tree's)
            rss += (40 + k) * MiB
        pss = rss // 2
        procs.append(ProcMem(pid, rss, private=rss // 3, est_pss=pss, est_private=pss // 2))
        pss_procs.append(ProcMem(pid, rss, pss, pss // 2, pss - pss // 2, 0, est_pss=pss, est_private=pss // 2))
    return TreeSample(t, "rss", tuple(procs)), (TreeSample(t, "pss", tuple(pss_procs)) if i % 4 == 0 else None)


def _write(path: str, n: int, hz: float = 2.0, tiers=TIERS) -> dict:
    """n rounds through a Recorder; returns the truth: each pid's peak rss (value, t), the tree's, its min, last."""
    rec = Recorder(path, flush_s=0.05, tiers=tiers)
    rec.begin("r", ["x"], "/", "2026-01-01T00:00:00+0000", 1.7e9, 10, {})
    pids = [10, 11, 12, 13]
    for pid, role in zip(pids, ("main", "dataloader_worker", "dataloader_worker", "helper")):
        rec.put(ProcessSeen(0.0, pid, 1, role, "python", "python train.py", 1.7e9))
    truth: dict = {"pid": {}, "tree": (-1, 0.0), "min": (1 << 62, 0.0)}
    for i in range(n):
        r, p = _round(i, hz, pids)
        rec.put(r)
        if p is not None:
            rec.put(p)
        for m in r.procs:
            if m.rss > truth["pid"].get(m.pid, (-1, 0))[0]:
                truth["pid"][m.pid] = (m.rss, r.t)
        tot = r.rss_total
        if tot > truth["tree"][0]:
            truth["tree"] = (tot, r.t)
        if tot < truth["min"][0]:
            truth["min"] = (tot, r.t)
        truth["last"] = r.t
        if i % 500 == 0:
            assert rec.sync(30)
    assert rec.sync(30)
    truth["compactor"] = rec.compactor
    rec.close()
    return truth


def test_downsampling_keeps_every_peak_the_min_and_the_last_round(tmp_path):
    path = str(tmp_path / "r.sqlite")
    n = 3600  # 30 min at 2 Hz
    truth = _write(path, n)
    assert truth["compactor"].passes > 10
    rd = RunData(path)
    try:
        rows = rd.con.execute("SELECT COUNT(*) FROM samples WHERE kind=?", (KIND_RSS,)).fetchone()[0]
        assert rows < n * 4 / 3  # most rounds are gone...
        peaks = rd.peaks_by_pid()
        kept = rd.process_peaks()
        for pid, (v, t) in truth["pid"].items():
            assert peaks[pid][0] == v  # ...but each process's peak stays, with its time
            assert kept[(pid, "rss")] == (v, t)
            # the one-round spikes are not the tree's peak: their rounds were dropped, the peak kept
        assert rd.tree_peak(KIND_RSS) == (truth["tree"][1], truth["tree"][0])
        totals = dict(rd.tree_totals(KIND_RSS))
        assert totals[truth["min"][1]] == truth["min"][0]
        assert max(totals) == truth["last"]
        # the recent window is whole: every round of the last 60 s
        recent = [t for t in totals if t > truth["last"] - 55]
        assert len(recent) >= 55 * 2
        s = summarize(rd)
        by_pid = {p["pid"]: p["peak_rss_bytes"] for p in s["processes"]}
        assert by_pid == {pid: v for pid, (v, _) in truth["pid"].items()}
        assert s["peak"]["tree_rss_bytes"] == truth["tree"][0]
    finally:
        rd.close()


def test_a_long_run_s_rows_stop_growing(tmp_path):
    """The rows kept grow with the number of coarse buckets, not with the rounds: the second half of a run adds
    a small share of what the first hour kept."""
    half = str(tmp_path / "a.sqlite")
    whole = str(tmp_path / "b.sqlite")
    _write(half, 3600)
    _write(whole, 7200)
    counts = []
    for path in (half, whole):
        con = sqlite3.connect(path)
        counts.append(con.execute("SELECT COUNT(*) FROM samples").fetchone()[0])
        con.close()
    full_per_half = 3600 * 4 * 1.25
    assert counts[0] < full_per_half / 2
    # the second 30 min: 30 coarse buckets of at most ~20 rounds of 4 rows, nothing like its 18,000 rows
    assert counts[1] - counts[0] < 3600


def test_rounds_near_events_stay_whole(tmp_path):
    path = str(tmp_path / "r.sqlite")
    rec = Recorder(path, flush_s=0.05, tiers=TIERS)
    rec.put(ProcessSeen(0.0, 10, 1, "main", "python", "python", 1.7e9))
    for i in range(2400):
        t = i / 2.0
        if i == 400:
            rec.put(Event(t, 10, "phase", {"name": "eval", "state": "switch", "auto": True, "pid": 10}))
        rec.put(TreeSample(t, "rss", (ProcMem(10, 100 * MiB + (i % 13) * 4096, est_pss=1, est_private=1),)))
    assert rec.sync(30)
    rec.close()
    rd = RunData(path)
    try:
        ts = [t for t, _ in rd.tree_totals(KIND_RSS)]
    finally:
        rd.close()
    assert [t for t in ts if 198 <= t <= 202] == [199.0, 199.5, 200.0, 200.5, 201.0]
    assert len([t for t in ts if 100 <= t < 180]) < 80


def test_a_reader_sees_the_record_before_or_after_a_pass(tmp_path):
    """A reader in a read transaction keeps its view while a pass deletes rounds (WAL), then sees the new one."""
    path = str(tmp_path / "r.sqlite")
    rec = Recorder(path, flush_s=0.05, tiers=TIERS)
    rec.begin("r", ["x"], "/", "2026-01-01T00:00:00+0000", 1.7e9, 10, {})
    rec.put(ProcessSeen(0.0, 10, 1, "main", "python", "python", 1.7e9))
    for i in range(100):
        rec.put(TreeSample(i / 2.0, "rss", (ProcMem(10, MiB + i * 4096, est_pss=1, est_private=1),)))
    assert rec.sync(30)
    rd = RunData(path)
    try:
        rd.con.execute("BEGIN")
        before = rd.con.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        assert before == 100
        for i in range(100, 400):  # 150 s: a pass reduces the first 90 s
            rec.put(TreeSample(i / 2.0, "rss", (ProcMem(10, MiB + i * 4096, est_pss=1, est_private=1),)))
        assert rec.sync(30)
        assert rec.compactor.deleted > 0
        assert rd.con.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == before
        rd.con.execute("COMMIT")
        after = rd.con.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        assert after < 400 - rec.compactor.deleted + 1
        assert summarize(rd)["peak"]["tree_rss_bytes"] == MiB + 399 * 4096
    finally:
        rd.close()
        rec.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from test_record_buckets import TIERS, _round
    from memscope.model import ProcessSeen
    from memscope.record.writer import Recorder
    rec = Recorder(sys.argv[1], flush_s=0.01, tiers=TIERS)
    rec.begin("r", ["x"], "/", "2026-01-01T00:00:00+0000", 1.7e9, 10, {})
    for pid in (10, 11, 12, 13):
        rec.put(ProcessSeen(0.0, pid, 1, "main" if pid == 10 else "helper", "python", "python", 1.7e9))
    i = 0
    while True:  # until killed: rounds at 2 Hz of the run's time, as fast as the writer takes them
        r, p = _round(i, 2.0, [10, 11, 12, 13])
        rec.put(r)
        if p is not None:
            rec.put(p)
        if i % 50 == 0:
            rec.sync(30)
            if rec.compactor.passes >= 3:
                print("passes", flush=True)
        i += 1
    """
)


def test_a_run_killed_while_downsampling_leaves_a_record_that_opens(tmp_path):
    path = str(tmp_path / "r.sqlite")
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.Popen([PY, "-c", CHILD, path, here], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "passes"
        time.sleep(0.3)  # it goes on writing and reducing
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    rd = RunData(path)
    try:
        last = rd.last_sample_t()
        assert last is not None and last > 150
        n = int(round(last * 2.0)) + 1
        truth: dict[int, int] = {}
        tree = 0
        for i in range(n):
            r, _ = _round(i, 2.0, [10, 11, 12, 13])
            for m in r.procs:
                truth[m.pid] = max(truth.get(m.pid, 0), m.rss)
            tree = max(tree, r.rss_total)
        s = summarize(rd)
        assert {q["pid"]: q["peak_rss_bytes"] for q in s["processes"]} == truth
        assert s["peak"]["tree_rss_bytes"] == tree
        assert s["exit"]["cause"] == "unknown"
        json.dumps(s)
    finally:
        rd.close()


# The schema of records written before the downsampling (no peaks table, no host index).
OLD_SCHEMA = """
CREATE TABLE run (id TEXT PRIMARY KEY, command TEXT, cwd TEXT, started_at TEXT, t0_epoch REAL,
  root_pid INTEGER, ended_at TEXT, duration_s REAL, exit_cause TEXT, summary TEXT, meta TEXT);
CREATE TABLE processes (pid INTEGER PRIMARY KEY, ppid INTEGER, role TEXT, name TEXT, cmdline TEXT,
  create_time REAL, first_t REAL, exit_t REAL, exit_code INTEGER, exit_signal TEXT);
CREATE TABLE samples (t REAL, kind INTEGER, pid INTEGER, rss INTEGER, pss INTEGER, anon INTEGER,
  file INTEGER, swap INTEGER, private INTEGER, est_pss INTEGER, est_private INTEGER);
CREATE INDEX samples_t ON samples (kind, t);
CREATE TABLE host (t REAL, total INTEGER, available INTEGER, swap_total INTEGER, swap_used INTEGER,
  lim INTEGER, cgroup_usage INTEGER, host_oom INTEGER, cgroup_oom INTEGER);
CREATE TABLE events (t REAL, pid INTEGER, kind TEXT, data TEXT);
"""


def test_a_record_from_before_the_downsampling_opens_and_summarizes_the_same(tmp_path):
    """An old-format record (every round, no peaks table) and the same run recorded now give the same peaks."""
    from memscope.record.writer import _apply

    old = str(tmp_path / "old.sqlite")
    con = sqlite3.connect(old)
    con.executescript(OLD_SCHEMA)
    con.execute("INSERT INTO run (id, command, cwd, started_at, root_pid, meta) VALUES ('r','[]','/','x',10,'{}')")
    pids = [10, 11, 12, 13]
    for pid in pids:
        _apply(con, ProcessSeen(0.0, pid, 1, "main" if pid == 10 else "helper", "python", "python", 1.7e9))
    for i in range(600):
        r, p = _round(i, 2.0, pids)
        _apply(con, r)
        if p is not None:
            _apply(con, p)
    con.commit()
    con.close()
    new = str(tmp_path / "new.sqlite")
    truth = _write(new, 600)
    a, b = RunData(old), RunData(new)
    try:
        assert not a.has_peaks and b.has_peaks
        assert a.process_peaks() == {}
        assert a.peaks_by_pid() == b.peaks_by_pid()
        assert {pid: v[0] for pid, v in a.peaks_by_pid().items()} == {p: v for p, (v, _) in truth["pid"].items()}
        sa, sb = summarize(a), summarize(b)
        for k in ("peak_rss_bytes", "peak_pss_bytes"):
            assert [q[k] for q in sa["processes"]] == [q[k] for q in sb["processes"]]
        assert sa["peak"] == sb["peak"]
        assert sa["unavailable"] == {}
    finally:
        a.close()
        b.close()


def test_pss_rounds_keep_their_peak_too(tmp_path):
    path = str(tmp_path / "r.sqlite")
    _write(path, 1200)
    rd = RunData(path)
    try:
        truth = 0
        for i in range(0, 1200, 4):
            _, p = _round(i, 2.0, [10, 11, 12, 13])
            truth = max(truth, p.pss_total)
        assert rd.tree_peak(KIND_PSS)[1] == truth
    finally:
        rd.close()


def _noisy_leak(path: str, tiers) -> None:
    """30 min at 2 Hz of one process leaking 12 kB/s under 4 MiB of noise: each round's wobble is larger than
    what a minute leaks (as in a real training: statm moves by allocator steps)."""
    rec = Recorder(path, flush_s=0.05, tiers=tiers)
    rec.begin("r", ["x"], "/", "2026-01-01T00:00:00+0000", 1.7e9, 10, {})
    rec.put(ProcessSeen(0.0, 10, 1, "main", "python", "python", 1.7e9))
    rng = random.Random(1)
    for i in range(3600):
        v = 200 * MiB + i * 6000 + int(rng.gauss(0, 4 * MiB))
        rec.put(TreeSample(i / 2.0, "rss", (ProcMem(10, v, private=v, est_pss=v, est_private=v),)))
        if i % 500 == 0:
            assert rec.sync(30)
    assert rec.sync(30)
    rec.close()


def test_the_leak_fit_on_a_downsampled_record_agrees_with_the_full_one(tmp_path):
    """The same run recorded whole and downsampled: the same verdict, slopes within 10 % (one floor point per
    bucket of the coarsest tier; read round by round, the recent whole rounds outweigh the old buckets' few and
    sit on another floor: -38 % here)."""
    full, small = str(tmp_path / "full.sqlite"), str(tmp_path / "small.sqlite")
    _noisy_leak(full, None)
    _noisy_leak(small, TIERS)
    out = []
    for path in (full, small):
        rd = RunData(path)
        try:
            out.append(summarize(rd)["leak"])
        finally:
            rd.close()
    assert out[0]["verdict"] == out[1]["verdict"] == "leak"
    assert abs(out[1]["slope_bytes_per_s"] / out[0]["slope_bytes_per_s"] - 1) < 0.10


# (start s, height of the main's est_pss) of short spikes, all older than the full-resolution window: three in one
# 60 s bucket (two of them 10 s apart, the smallest between them), the rest apart.
_SPIKES = ((130.0, 200 * MiB), (140.0, 40 * MiB), (150.0, 120 * MiB), (400.0, 300 * MiB), (700.0, 80 * MiB))


def _spiky(path: str, tiers) -> None:
    """20 min at 5 Hz of 4 processes with a wobble, and ``_SPIKES`` in the main: 2 rounds up, 2 s high, 2 down."""
    rec = Recorder(path, flush_s=0.05, tiers=tiers)
    rec.begin("r", ["x"], "/", "2026-01-01T00:00:00+0000", 1.7e9, 10, {})
    pids = [10, 11, 12, 13]
    for pid, role in zip(pids, ("main", "dataloader_worker", "dataloader_worker", "helper")):
        rec.put(ProcessSeen(0.0, pid, 1, role, "python", "python train.py", 1.7e9))
    rng = random.Random(3)
    for i in range(6000):
        t = i / 5.0
        up = 0
        for s, h in _SPIKES:
            x = t - s
            if 0 <= x <= 2.8:
                up = h * min(1.0, (x + 0.2) / 0.6, (3.0 - x) / 0.6)
        procs = []
        for k, pid in enumerate(pids):
            pss = (100 + 10 * k) * MiB + int(rng.gauss(0, 0.5 * MiB)) + (int(up) if k == 0 else 0)
            procs.append(ProcMem(pid, 2 * pss, private=pss, est_pss=pss, est_private=pss // 2))
        rec.put(TreeSample(t, "rss", tuple(procs)))
        if i % 500 == 0:
            assert rec.sync(30)
    assert rec.sync(30)
    rec.close()


def test_spikes_in_old_buckets_are_found_as_at_full_resolution(tmp_path):
    """Short spikes older than the full-resolution window, three of them in one bucket: the summary on the
    downsampled record finds each, with the same height, start and end as on the record that kept every round
    (a bucket's one maximum merged the three into one, and the smallest vanished)."""
    full, small = str(tmp_path / "full.sqlite"), str(tmp_path / "small.sqlite")
    _spiky(full, None)
    _spiky(small, TIERS)
    out = []
    for path in (full, small):
        rd = RunData(path)
        try:
            out.append(summarize(rd)["spikes"])
            rows = rd.con.execute("SELECT COUNT(DISTINCT t) FROM samples WHERE kind=?", (KIND_RSS,)).fetchone()[0]
        finally:
            rd.close()
    assert rows < 6000 / 2  # the record was downsampled
    want, got = out
    assert [round(s["start_s"]) for s in want] == [round(s) for s, _ in _SPIKES]
    assert len(got) == len(want)
    for a, b in zip(want, got):
        assert abs(a["start_s"] - b["start_s"]) <= 0.2 and abs(a["end_s"] - b["end_s"]) <= 0.2
        assert abs(a["height_bytes"] - b["height_bytes"]) <= 0.01 * a["height_bytes"]


def test_the_rounds_kept_around_excursions_are_bounded():
    """A tree whose memory jumps every 5 s for 2 h (1,440 excursions): the spans kept around them stay within the
    budget (a share of the last hour), so such a run's record stays bounded; a lone spike keeps its rise, its top
    and its fall."""
    ex = buckets.Excursions(window=30.0)
    rows = [(i / 5, 100 * MiB + (50 * MiB if i % 25 < 3 else 0) + (i * 7919 % 97) * 4096) for i in range(5 * 7200)]
    for k in range(0, len(rows), 300):
        ex.feed(rows[k : k + 300])
    assert ex.found > 1400 and ex.skipped > 1000
    kept = sum(min(h, 7200.0) - max(lo, 3600.0) for lo, h in zip(ex.lo, ex.hi) if h > 3600.0)
    assert 0 < kept <= buckets.MAX_KEPT_FRACTION * 3600 + buckets.SPIKE_FULL_S + 2 * buckets.SPIKE_MARGIN_S
    ex = buckets.Excursions(window=30.0)
    top = lambda i: 50 * MiB + (i == 515) * 8 * MiB  # noqa: E731
    ex.feed([(i / 5, 100 * MiB + (top(i) if 500 <= i < 530 else 0) + (i * 7919 % 97) * 4096) for i in range(2000)])
    m, full = buckets.SPIKE_MARGIN_S, buckets.SPIKE_FULL_S
    assert full < 2.0  # the spike (100.0-105.8 s) is longer than what is kept whole from its start
    assert ex.near(100.0 - m) and ex.near(100.0 + full) and not ex.near(100.0 - m - 0.2)  # its rise
    assert ex.near(103.0) and not ex.near(102.0) and not ex.near(104.0)  # its top, and not the rest
    assert ex.near(105.8 - m) and ex.near(105.8 + m) and not ex.near(105.8 + m + 0.2)  # its fall


def test_one_roles_fast_total_is_that_of_all_roles(tmp_path):
    """The summary and reopen read the main's own private memory alone (``role_fast_total``: its pids' rows, no
    join): the same series as ``role_fast_totals``' entry for it, with and without floor buckets."""
    path = str(tmp_path / "r.sqlite")
    _write(path, 2000)
    rd = RunData(path)
    try:
        for role in ("main", "dataloader_worker", "helper"):
            for column in ("private", "est_pss"):
                for floor_s in (0.0, 7.0):
                    want = rd.role_fast_totals(column=column, floor_s=floor_s).get(role)
                    assert want and rd.role_fast_total(role, column=column, floor_s=floor_s) == want
        assert rd.role_fast_total("rank") is None and rd.role_fast_total("main", column="pss; DROP") is None
    finally:
        rd.close()
