"""Bounded min/max series (memscope.ui.series): decimation bounds, spikes, ordering, RunSeries from records."""

import gc
import json
import math
import random
import sys
import threading
import time
import tracemalloc

import pytest

import memscope
from memscope.model import Event, HostSample, ProcessExited, ProcessSeen, ProcMem, RunEnded, TreeSample
from memscope.ui.series import AlignedMinMax, MinMaxSeries, RunSeries

MiB = 1 << 20
DAY_10HZ = 864_000


# -- a brute-force reference ---------------------------------------------------------------------------------
def reference_points(data, w):
    """What MinMaxSeries.points() must be for data (time-ordered) and final width w, computed directly."""
    buckets = {}
    order = []
    for t, y in data:
        k = math.floor(t / w)
        if k not in buckets:
            buckets[k] = [t, y, t, y]
            order.append(k)
        b = buckets[k]
        if y < b[1]:
            b[0], b[1] = t, y
        if y > b[3]:
            b[2], b[3] = t, y
    ts, ys = [], []
    for k in order:
        tmin, ymin, tmax, ymax = buckets[k]
        if tmin == tmax:
            pts = [(tmin, ymin)]
        elif tmin < tmax:
            pts = [(tmin, ymin), (tmax, ymax)]
        else:
            pts = [(tmax, ymax), (tmin, ymin)]
        for t, y in pts:
            ts.append(t)
            ys.append(y)
    if data and data[-1][0] > ts[-1]:
        ts.append(data[-1][0])
        ys.append(data[-1][1])
    return ts, ys


# -- MinMaxSeries ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["first", "middle", "last", "random"])
def test_day_at_10hz_is_bounded_and_a_spike_survives(where):
    rnd = random.Random(where)
    spike_at = {"first": 0, "middle": DAY_10HZ // 2, "last": DAY_10HZ - 1, "random": rnd.randrange(DAY_10HZ)}[where]
    s = MinMaxSeries(max_points=2000)
    ys_in = [100.0 + rnd.random() * 10 for _ in range(DAY_10HZ)]
    ys_in[spike_at] = 1100.0  # 10x, one sample
    dip_at = (spike_at + DAY_10HZ // 3) % DAY_10HZ
    ys_in[dip_at] = 10.0  # and a one-sample dip
    for i, y in enumerate(ys_in):
        s.append(i * 0.1, y)
    ts, ys = s.points()
    assert len(s) == len(ts) == len(ys) <= 2000
    assert len(ts) > 1500  # the budget is used, not wasted
    assert s.samples == DAY_10HZ
    assert s.bucket_s > 0.2
    # The spike and the dip are there, at their own times, with their exact values.
    assert (spike_at * 0.1, 1100.0) in set(zip(ts, ys))
    assert (dip_at * 0.1, 10.0) in set(zip(ts, ys))
    assert max(ys) == max(ys_in) and min(ys) == min(ys_in)
    # Every point is a real sample, never an average.
    for t, y in zip(ts, ys):
        assert ys_in[round(t / 0.1)] == y
    assert ts == sorted(ts)


def test_points_match_brute_force_through_many_doublings():
    rnd = random.Random(1)
    s = MinMaxSeries(max_points=101, bucket_s=0.25)
    data = []
    t = 0.0
    for i in range(20_000):
        t += 0.25 * rnd.choice([1, 1, 1, 2, 7])  # uneven spacing, gaps; exact binary fractions
        y = rnd.choice([rnd.randrange(100), rnd.randrange(100), 5000 * rnd.random()])
        data.append((t, y))
        s.append(t, y)
        if i % 997 == 0:  # also in the middle, not only at the end
            assert s.points() == reference_points(data, s.bucket_s)
            assert len(s) <= 101
    assert s.points() == reference_points(data, s.bucket_s)
    assert len(s) == len(s.points()[0]) <= 101


def test_min_first_when_it_came_first():
    s = MinMaxSeries(bucket_s=1.0)
    for t, y in [(0.1, 5), (0.5, 1), (0.9, 9), (1.1, 3), (1.2, 8), (1.3, 0), (1.4, 4)]:
        s.append(t, y)
    ts, ys = s.points()
    # bucket 0: min (0.5) before max (0.9); bucket 1: max (1.2) before min (1.3), then the latest sample
    assert list(zip(ts, ys)) == [(0.5, 1), (0.9, 9), (1.2, 8), (1.3, 0), (1.4, 4)]
    assert len(s) == 5


def test_ties_keep_the_earlier_sample_and_flat_buckets_are_one_point():
    s = MinMaxSeries(bucket_s=1.0)
    for i in range(30):
        s.append(i * 0.25, 7)  # flat: 4 samples a bucket
    ts, ys = s.points()
    # One point per bucket (its first sample), plus the latest sample of the open bucket.
    assert ts == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 7.25]
    assert set(ys) == {7}


def test_bucket_doubling():
    s = MinMaxSeries(max_points=11, bucket_s=1.0)  # (11 - 1) // 2 = 5 buckets
    for t in range(5):
        s.append(t + 0.5, t)
    assert s.bucket_s == 1.0
    assert s.points() == ([0.5, 1.5, 2.5, 3.5, 4.5], [0, 1, 2, 3, 4])
    s.append(5.5, 5)  # a 6th bucket: width doubles, pairs merge
    assert s.bucket_s == 2.0
    assert s.points() == ([0.5, 1.5, 2.5, 3.5, 4.5, 5.5], [0, 1, 2, 3, 4, 5])
    assert len(s._closed) + 1 == 3
    for t in range(6, 40):
        s.append(t + 0.5, t % 3)
    assert s.bucket_s == 8.0  # 40 s in at most 5 buckets: 8 s each
    assert len(s) <= 11
    assert s.points() == reference_points([(t + 0.5, t if t < 6 else t % 3) for t in range(40)], 8.0)


def test_small_and_empty_series():
    s = MinMaxSeries()
    assert s.points() == ([], []) and len(s) == 0
    s.append(3.0, 1)
    assert s.points() == ([3.0], [1]) and len(s) == 1
    s.append(3.0, None)  # ignored
    assert len(s) == 1
    with pytest.raises(ValueError):
        MinMaxSeries(max_points=2)


# -- AlignedMinMax -------------------------------------------------------------------------------------------
def test_aligned_columns_share_times_and_keep_each_columns_extremes():
    rnd = random.Random(3)
    a = AlignedMinMax(max_points=200, bucket_s=0.25)
    rows = []
    for i in range(50_000):
        vals = {"main": 1000 + rnd.randrange(100), "dataloader_worker": 300 + rnd.randrange(50)}
        if i == 12_345:
            vals["main"] = 9999  # spike in one column
        if i == 33_333:
            vals["dataloader_worker"] = 1  # dip in another
        if i >= 20_000:
            vals["compile_worker"] = 50 + (5000 if i == 40_000 else 0)  # a column that appears later
        rows.append((i * 0.25, vals))
        a.append(i * 0.25, vals)
    assert len(a) <= 200
    pts = a.points()
    assert list(pts) == ["main", "dataloader_worker", "compile_worker"]
    ts = pts["main"][0]
    assert all(p[0] == ts for p in pts.values()) and ts == sorted(ts)
    by_t = {t: v for t, v in rows}
    for name, (ts_, ys) in pts.items():
        for t, y in zip(ts_, ys):
            assert by_t[t].get(name, 0) == y  # real rows; a column that did not exist yet is 0
        col = [v.get(name, 0) for _, v in rows]
        assert max(ys) == max(col) and min(ys) == min(col)
    assert (12_345 * 0.25) in ts and (33_333 * 0.25) in ts and (40_000 * 0.25) in ts
    tt, total = a.total()
    sums = [sum(v.values()) for _, v in rows]
    assert tt == ts and max(total) == max(sums) and min(total) == min(sums)


# -- RunSeries, synthetic records ------------------------------------------------------------------------------
def seen(t, pid, role):
    return ProcessSeen(t, pid, 1, role, f"p{pid}", f"cmd {pid}", 0.0)


def host(t, available, limit):
    return HostSample(t, 64 << 30, available, 0, 0, limit, None, 0, None)


def test_run_series_sums_pss_per_role():
    rs = RunSeries()
    assert rs.version == 0
    for rec in [seen(0.0, 10, "main"), seen(0.0, 11, "dataloader_worker"), seen(0.0, 12, "dataloader_worker")]:
        rs.feed(rec)
    rs.feed(TreeSample(0.5, "pss", (ProcMem(10, 900, 500), ProcMem(11, 300, 100), ProcMem(12, 300, 150))))
    rs.feed(TreeSample(1.0, "rss", (ProcMem(10, 1000), ProcMem(11, 400), ProcMem(12, 400))))
    # the workers are gone in this round: they count 0 there
    rs.feed(ProcessExited(1.2, 11, 0, None))
    rs.feed(ProcessExited(1.2, 12, None, "SIGKILL"))
    rs.feed(TreeSample(1.5, "pss", (ProcMem(10, 950, 600),)))
    # a new process, then its role becomes known and changes (pid 13: helper -> dataloader_worker)
    rs.feed(seen(1.6, 13, "helper"))
    rs.feed(TreeSample(2.0, "pss", (ProcMem(10, 950, 610), ProcMem(13, 100, 70))))
    rs.feed(seen(2.1, 13, "dataloader_worker"))
    rs.feed(TreeSample(2.5, "pss", (ProcMem(10, 950, 620), ProcMem(13, 100, 80), ProcMem(99, 10, 5))))
    rs.feed(TreeSample(3.0, "rss", (ProcMem(10, 1200), ProcMem(13, 100))))
    v = rs.version
    rs.feed(TreeSample(3.5, "pss", ()))  # no process found: skipped
    assert rs.version == v
    rs.feed(host(1.0, 10 << 30, None))
    rs.feed(host(2.0, 9 << 30, 8 << 30))
    snap = rs.snapshot()
    json.dumps(snap)
    by_role = snap["tree_pss_by_role"]
    assert list(by_role) == ["main", "dataloader_worker", "helper", "other"]  # memscope's role order
    ts = [0.5, 1.5, 2.0, 2.5]
    assert all(v["t"] == ts for v in by_role.values())
    assert by_role["main"]["y"] == [500, 600, 610, 620]
    assert by_role["dataloader_worker"]["y"] == [250, 0, 0, 80]
    assert by_role["helper"]["y"] == [0, 0, 70, 0]
    assert by_role["other"]["y"] == [0, 0, 0, 5]  # unknown pid
    assert snap["main_rss"] == {"t": [1.0, 3.0], "y": [1000, 1200]}
    assert snap["tree_rss"] == {"t": [1.0, 3.0], "y": [1800, 1300]}
    assert snap["host_available"] == {"t": [1.0, 2.0], "y": [10 << 30, 9 << 30]}
    assert snap["limit"] == {"t": [2.0], "y": [8 << 30]}  # None skipped
    assert snap["events"] == []
    assert snap["t_last"] == 3.0 and snap["ended"] is False
    assert rs.exited == {11, 12}


def _worker_round(t, pids):
    procs = [ProcMem(10, 900 << 20, private=800 << 20, est_pss=850 << 20, est_private=800 << 20)]
    procs += [ProcMem(p, 300 << 20, private=50 << 20, est_pss=100 << 20, est_private=50 << 20) for p in pids]
    return TreeSample(t, "rss", tuple(procs))


def test_workers_restarted_every_epoch_never_evict_each_other(monkeypatch):
    """Issue 24's week replay: past 64 processes seen (8 DataLoader workers restarted every epoch, ~3.5 h of a real
    run) eight new workers evicted each other at every round, each eviction reading 64 series whole: the replay
    went from 16 s to 800 s a simulated hour, and a live kernel would have lost a core. Exited processes go first;
    live ones stay; none of it reads a series."""
    rs = RunSeries()
    rs.feed(seen(0.0, 10, "main"))
    calls: list[int] = []
    real = MinMaxSeries.points

    def counted(self):
        calls.append(1)
        return real(self)

    t, pid = 0.0, 100
    for epoch in range(12):
        workers = list(range(pid, pid + 8))
        pid += 8
        for w in workers:
            rs.feed(seen(t, w, "dataloader_worker"))
        if epoch == 11:  # the last epoch: from here on, a series read whole is the defect
            monkeypatch.setattr(MinMaxSeries, "points", counted)
        for _ in range(20):
            t += 0.2
            rs.feed(_worker_round(t, workers))
        for w in workers if epoch < 11 else []:
            rs.feed(ProcessExited(t, w, 0, None))
    assert calls == []
    assert len(rs.proc_private) == 64
    assert set(workers) <= set(rs.proc_private)  # every live worker is watched
    assert all(len(rs.proc_private[w].points()[0]) == 20 for w in workers)  # from its first round on


def test_more_live_processes_than_kept_do_not_churn():
    rs = RunSeries()
    rs.feed(seen(0.0, 10, "main"))
    pids = list(range(100, 170))  # 70 live workers, 64 kept
    for p in pids:
        rs.feed(seen(0.0, p, "dataloader_worker"))
    rs.feed(_worker_round(0.2, pids))
    kept = set(rs.proc_private)
    for i in range(2, 30):
        rs.feed(_worker_round(0.2 * i, pids))
    assert set(rs.proc_private) == kept and len(kept) == 64
    assert all(len(rs.proc_private[p].points()[0]) == 29 for p in kept)


def test_run_series_events_version_and_changed_since():
    rs = RunSeries()
    v0 = rs.version
    rs.feed(Event(0.1, 5, "output", {"stream": "stdout", "text": "hello\n"}))
    assert rs.version == v0 and not rs.changed_since(v0)  # output is not charted
    rs.feed(Event(0.2, 5, "agent_hello", {"python": "3.11"}))
    assert rs.changed_since(v0)
    v1 = rs.version
    assert not rs.changed_since(v1)
    rs.feed(Event(0.3, 5, "fault", {"text": "x" * 200_000, "obj": object()}))  # long text, not JSON-able
    for i in range(300):
        rs.feed(Event(1.0 + i, None, "phase_start", {"name": f"epoch {i}"}))
    rs.feed(RunEnded(400.0, {"exit": {"cause": "ok"}}))
    snap = rs.snapshot()
    json.dumps(snap)
    ev = snap["events"]
    assert len(ev) == 200
    assert ev[0]["data"]["name"] == "epoch 100" and ev[-1]["data"]["name"] == "epoch 299"
    assert snap["ended"] is True
    assert snap["version"] == rs.version > v1
    rs2 = RunSeries()
    rs2.feed(Event(0.3, 5, "fault", {"text": "x" * 200_000, "obj": object()}))
    e = rs2.snapshot()["events"][0]
    assert e["kind"] == "fault" and 4000 < len(e["data"]["text"]) < 4100 and isinstance(e["data"]["obj"], str)


def test_run_series_feed_and_snapshot_from_two_threads():
    rs = RunSeries(max_points=200)
    rs.feed(seen(0.0, 1, "main"))
    stop = threading.Event()
    errors = []

    def reader():
        try:
            while not stop.is_set():
                s = rs.snapshot()
                json.dumps(s)
                for v in s["tree_pss_by_role"].values():
                    assert len(v["t"]) == len(v["y"]) <= 200
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    th = threading.Thread(target=reader)
    th.start()
    for i in range(50_000):
        rs.feed(TreeSample(i * 0.1, "pss" if i % 2 else "rss", (ProcMem(1, 1000 + i, 900 + i),)))
    stop.set()
    th.join()
    assert not errors
    assert len(rs.snapshot()["tree_rss"]["t"]) <= 200


# -- RunSeries from a real record (and live, through Run.subscribe) ------------------------------------------
def test_from_record_of_a_real_run(tmp_path):
    run = memscope.run(
        [sys.executable, "-c", "import time; x=bytearray(50<<20); print('hi'); time.sleep(1.5)"],
        record_dir=str(tmp_path),
        interval_s=0.05,
        pss_interval_s=0.3,
        output="capture",
    )
    try:
        time.sleep(0.6)  # a view opened after the run started...
        live = RunSeries.follow(run)  # ...reads the record so far, then keeps up
        late = RunSeries.follow(run, history=False)  # no history: still knows which process is main
        assert run.wait(60) is not None
    finally:
        if not run.ended:
            run.kill()
    rs = RunSeries.from_record(run.record_path)
    snap = rs.snapshot()
    json.dumps(snap)
    assert "main" in snap["tree_pss_by_role"]
    main_pss = snap["tree_pss_by_role"]["main"]
    assert main_pss["t"] and max(main_pss["y"]) > 50 * MiB
    assert snap["main_rss"]["t"] and max(snap["main_rss"]["y"]) > 50 * MiB
    assert max(snap["tree_rss"]["y"]) > 50 * MiB
    assert snap["host_available"]["t"]
    assert snap["ended"] is True
    assert all(e["kind"] != "output" for e in snap["events"])
    assert any(e["kind"] == "exit_status" for e in snap["events"])
    assert snap["tree_rss"]["t"] == sorted(snap["tree_rss"]["t"])

    # The live series saw the same rounds as the record: none lost, none twice (once they caught up with RunEnded).
    deadline = time.monotonic() + 10
    while not (live.ended and late.ended) and time.monotonic() < deadline:
        time.sleep(0.05)
    live.close()
    late.close()
    lsnap = live.snapshot()
    assert lsnap["ended"]
    assert lsnap["tree_rss"] == snap["tree_rss"]
    assert lsnap["host_available"] == snap["host_available"]
    assert lsnap["tree_pss_by_role"] == snap["tree_pss_by_role"]
    assert lsnap["main_rss"] == snap["main_rss"]
    assert [e["t"] for e in lsnap["events"]] == [e["t"] for e in snap["events"]]
    lt = late.snapshot()
    assert lt["tree_rss"]["t"][0] > 0.5 and lt["tree_rss"]["t"][-1] == snap["tree_rss"]["t"][-1]
    assert max(lt["main_rss"]["y"]) > 50 * MiB
    assert max(lt["tree_pss_by_role"]["main"]["y"]) > 50 * MiB

    # Decimation on a real record: a tiny budget still keeps the peaks.
    small = RunSeries.from_record(run.record_path, max_points=21).snapshot()
    assert 0 < len(small["tree_rss"]["t"]) <= 21
    assert max(small["tree_rss"]["y"]) == max(snap["tree_rss"]["y"])
    assert max(small["main_rss"]["y"]) == max(snap["main_rss"]["y"])
    assert 0 < len(small["tree_pss_by_role"]["main"]["t"]) <= 21


# -- cost of a day at 10 Hz -----------------------------------------------------------------------------------
ROLES16 = ["main"] + ["dataloader_worker"] * 8 + ["compile_worker"] * 4 + ["helper"] * 2 + ["other"]


def _day_records(start=0, stop=DAY_10HZ):
    """24 h at 10 Hz, 16 processes, alternating RSS and PSS rounds; ProcMem tuples from a pool."""
    rnd = random.Random(7)
    pool_rss = [tuple(ProcMem(100 + j, 10**8 + rnd.randrange(10**7)) for j in range(16)) for _ in range(499)]
    pool_pss = [
        tuple(ProcMem(100 + j, 10**8 + rnd.randrange(10**7), 5 * 10**7 + rnd.randrange(10**7)) for j in range(16))
        for _ in range(499)
    ]
    for i in range(start, stop):
        yield TreeSample(i * 0.1, "pss", pool_pss[i % 499]) if i % 2 else TreeSample(i * 0.1, "rss", pool_rss[i % 499])


def _fresh_series():
    rs = RunSeries()
    for j, role in enumerate(ROLES16):
        rs.feed(seen(0.0, 100 + j, role))
    for i in range(0, 86_400, 1):  # host samples at 1 Hz too
        rs.feed(host(float(i), (32 << 30) - i, 48 << 30))
    return rs


def test_cost_of_a_day_at_10hz_with_16_processes(capsys):
    # Timing (no tracemalloc): feed only, records made ahead in chunks.
    rs = _fresh_series()
    feed_s = 0.0
    for start in range(0, DAY_10HZ, 50_000):
        chunk = list(_day_records(start, min(DAY_10HZ, start + 50_000)))
        t0 = time.perf_counter()
        for rec in chunk:
            rs.feed(rec)
        feed_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    snap = rs.snapshot()
    text = json.dumps(snap)
    snap_s = time.perf_counter() - t0
    for name in ("main_rss", "tree_rss", "host_available", "limit"):
        assert len(snap[name]["t"]) <= 2000
    for v in snap["tree_pss_by_role"].values():
        assert 0 < len(v["t"]) <= 2000

    # Memory held by the RunSeries (tracemalloc on a second, traced pass). Six hours, not the day: the series
    # reach their caps within the first hour, and tracing slows the feed tenfold (the day cost 55 s of CI).
    del rs, chunk, snap
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        rs = _fresh_series()
        for rec in _day_records(0, DAY_10HZ // 4):
            rs.feed(rec)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    with capsys.disabled():
        print(
            f"\n[series] 24h@10Hz: {DAY_10HZ:,} TreeSample records x 16 procs (+86,400 host samples) fed in "
            f"{feed_s:.2f} s ({feed_s / DAY_10HZ * 1e6:.2f} us/record); RunSeries holds {held / 1024:.0f} KiB "
            f"after 6 h (tracemalloc); snapshot+json {snap_s * 1e3:.1f} ms, {len(text) / 1024:.0f} KiB of JSON"
        )
    assert held < 16 * MiB
