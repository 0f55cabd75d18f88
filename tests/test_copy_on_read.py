"""DataLoader copy-on-read (pytorch/pytorch#13246): real runs with 3 forked workers over a list of dicts (detected,
the attribute named by the workers' own census) and over the same data in numpy arrays (not detected); the rule
on series that look like it and are not; the probe's bounds; the summary's section, its advice and its marks."""

import sys
import time

import pytest
from conftest import has_torch, script

from memscope.agent.probes import dataset_objects as probe
from memscope.analysis import copy_on_read as cor
from memscope.analysis.advice import advise
from memscope.collect.messages import validate
from memscope.record.reader import RunData
from memscope.ui.fragments import copy_on_read_marks, process_table, verdict_card

MiB = 1 << 20
ITEMS = "800000"  # ~240 MiB of dicts: each worker copies ~120 MiB of them; the numpy twin ~35 MiB of its own


# -- real runs --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dicts(tmp_path_factory):
    return _module_run(tmp_path_factory, "dicts")


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    return _module_run(tmp_path_factory, "numpy")


def _module_run(tmp_path_factory, kind):
    if not has_torch():
        pytest.skip("needs torch")
    import memscope

    d = str(tmp_path_factory.mktemp("runs"))
    run = memscope.run(
        [sys.executable, script("copy_on_read.py"), kind, ITEMS, "3"],
        record_dir=d,
        interval_s=0.1,
        pss_interval_s=0.5,
        output="capture",
    )
    try:
        s = run.wait(240)
    finally:
        if not run.ended:
            run.kill()
    assert s is not None and s["exit"]["cause"] == "ok", (s or {}).get("exit")
    return run, s


def test_list_of_dicts_is_copy_on_read_with_its_attribute_named(dicts):
    run, s = dicts
    c = s["copy_on_read"]
    assert c["detected"], c["reason"]
    workers = [w for w in c["workers"] if w["copy_on_read"]]
    assert len(workers) == 3
    for w in workers:
        # The worker's own memory rose while its RSS and its anonymous RSS stayed flat, its shared part fell.
        assert w["copied_bytes"] >= 64 * MiB
        assert abs(w["rss_change_bytes"]) < w["copied_bytes"] / 4
        assert abs(w["anon_rss_change_bytes"]) < w["copied_bytes"] / 4
        assert w["shared_bytes"] < w["shared_start_bytes"]
    p = c["parent"]
    print("parent", {k: v // MiB if isinstance(v, int) and k != "pid" else v for k, v in p.items()})
    assert p["pss_change_bytes"] > 32 * MiB  # the main's PSS rose ...
    assert abs(p["anon_rss_change_bytes"]) < p["pss_change_bytes"] / 2  # ... far more than it allocated
    a = c["attribute"]
    assert a["name"] == "annotations" and a["type"] == "list" and a["item_type"] == "dict" and a["len"] == 800000
    assert "list of 800,000 dict" in c["text"] and "`annotations`" in c["text"]
    # Bounded: where the tree levels off is above where it is, and below every process holding all it maps.
    assert c["tree_bytes"] <= c["bound_bytes"] <= c["tree_bytes"] + sum(w["shareable_bytes"] for w in workers)
    assert c["levelled"] == (c["bound_bytes"] == c["tree_bytes"])
    topics = [x["topic"] for x in s["advice"]]
    assert "copy_on_read" in topics and "workers" not in topics
    text = next(x["text"] for x in s["advice"] if x["topic"] == "copy_on_read")
    assert "`annotations`" in text and "numpy" in text and "gc.freeze()" in text and "num_workers=2" in text
    assert not any("validation" in x["text"] for x in s["advice"])  # this script has none


def test_the_workers_census_cost_and_live_detection_within_60_s(dicts):
    run, s = dicts
    rd = RunData(run.record_path)
    try:
        events = rd.events("dataset_objects")
        workers = [p for p in rd.processes() if p["role"] == "dataloader_worker"]
        assert {e["pid"] for e in events} == {p["pid"] for p in workers}  # once per worker
        assert all(e["data"]["duration_s"] < probe.BUDGET_S + 0.05 for e in events)
        born = min(p["first_t"] for p in workers)  # the copying starts with the workers
        t, found = born, None
        while t <= born + 60:
            found = cor.assess(rd, until_s=t)
            if found.detected and found.attribute:
                break
            t += 1.0
        assert found is not None and found.detected and found.attribute["name"] == "annotations", t
        print(f"named {t - born:.0f} s after the workers' fork; census {[e['data']['duration_s'] for e in events]}")
    finally:
        rd.close()


def test_the_report_marks_the_copying_workers(dicts):
    run, s = dicts
    from memscope.ui.report import render_html

    page = render_html(run.record_path)
    assert page.count("⚠ copy-on-read") == 3
    assert "Copy-on-read: 3 DataLoader workers" in page


def test_the_same_data_in_numpy_is_not_copy_on_read(arrays):
    run, s = arrays
    c = s["copy_on_read"]
    assert not c["detected"], c
    assert c["attribute"] is None  # arrays hold no per-item Python objects
    assert all(w["copied_bytes"] < 64 * MiB for w in c["workers"]) and len(c["workers"]) == 3
    assert "copy_on_read" not in [x["topic"] for x in s["advice"]]
    assert "copy-on-read" not in verdict_card(s).lower()


# -- the rule on series ------------------------------------------------------------------------------------------
def _procs(n=3, born=1.0, exits=None):
    ps = [{"pid": 100, "ppid": 1, "role": "main", "first_t": 0.0, "exit_t": None}]
    for i in range(n):
        ps.append(
            {"pid": 101 + i, "ppid": 100, "role": "dataloader_worker", "first_t": born, "exit_t": (exits or {}).get(i)}
        )
    return ps


def _series(copy_mib, rss_grow_mib=0, n=3, until=30, main_pss_grow=None, sibling_exit=None):
    """Rounds of a tree: the main maps 500 MiB anon, each worker shares them and copies ``copy_mib`` over 20 s."""
    rounds = {}
    k = n + 1
    for pid in [100] + [101 + i for i in range(n)]:
        rs = []
        for s in range(2, until):
            f = min(1.0, (s - 2) / 20)
            if pid == 100:
                grow = (main_pss_grow if main_pss_grow is not None else copy_mib * n / k) * f
                anon = 500 / k + grow
                rs.append((float(s), 560 * MiB, int((anon + 10) * MiB), int(anon * MiB), 500 * MiB))
            else:
                own = copy_mib * f + rss_grow_mib * f
                anon = 500 / k + own * (k - 1) / k
                rss = 560 + rss_grow_mib * f
                rs.append(
                    (
                        float(s),
                        int(rss * MiB),
                        int((anon + 5) * MiB),
                        int(anon * MiB),
                        int((500 + rss_grow_mib * f) * MiB),
                    )
                )
        rounds[pid] = rs
    return rounds


def test_rule_copy_on_read_is_detected_and_bounded():
    c = cor.detect(_procs(), _series(200))
    assert c.detected, c.reason
    assert len(c.copying) == 3 and c.bound_bytes and c.bound_bytes > c.tree_bytes
    assert c.to_dict()["copied_bytes"] > 3 * 100 * MiB


def test_rule_a_worker_that_allocates_is_not_copy_on_read():
    c = cor.detect(_procs(), _series(0, rss_grow_mib=200))
    assert not c.detected and not c.copying


def test_rule_small_copies_are_the_interpreter_not_the_dataset():
    c = cor.detect(_procs(), _series(30))
    assert not c.detected and "No copy-on-read" in c.reason


def test_rule_a_sibling_exiting_is_no_copy():
    # Workers' PSS rises when a sibling exits (the pages are shared by fewer) with nothing copied: that window
    # is not compared across the exit.
    procs = _procs(exits={2: 15.0})
    rounds = _series(0)
    for pid in (101, 102):
        rounds[pid] = [
            (t, r, p + (60 * MiB if t >= 15 else 0), a + (60 * MiB if t >= 15 else 0), ar)
            for t, r, p, a, ar in rounds[pid]
        ]
    rounds[103] = [r for r in rounds[103] if r[0] < 15]
    assert not cor.detect(procs, rounds).detected


def test_rule_the_parent_letting_go_is_no_copy():
    # The workers' PSS rises because the main freed the pages they shared: the tree does not grow.
    rounds = _series(200, main_pss_grow=-600)
    c = cor.detect(_procs(), rounds)
    assert not c.detected and "tree" in c.reason


def test_rule_on_a_prefix_and_without_workers():
    assert not cor.detect(_procs(), _series(200), until_s=3.0).detected  # one round: nothing yet
    assert cor.detect(_procs(), _series(200), until_s=12.0).detected
    assert not cor.detect(_procs(0), _series(200, n=0)).detected


def test_rule_names_the_attribute_from_the_workers_reports():
    report = {
        "dataset": "Annotations",
        "attributes": [
            {
                "name": "root",
                "type": "str",
                "len": 12,
                "item_type": None,
                "objects": 1,
                "bytes": 61,
                "python_objects": False,
            },
            {
                "name": "annotations",
                "type": "list",
                "len": 3_000_000,
                "item_type": "dict",
                "objects": 12_000_000,
                "bytes": 966_367_641,
                "python_objects": True,
            },
        ],
    }
    events = [{"t": 2.0, "pid": 101 + i, "data": report} for i in range(3)]
    c = cor.detect(_procs(), _series(200), events)
    assert c.attribute["name"] == "annotations"
    assert c.attribute["text"] == "list of 3,000,000 dict, ~0.9 GiB"
    assert "`annotations` (list of 3,000,000 dict, ~0.9 GiB)" in c.advice()


# -- the probe ---------------------------------------------------------------------------------------------------
class _Counting(list):
    reads = 0

    def __getitem__(self, i):
        type(self).reads += 1
        return super().__getitem__(i)


class _Info:
    def __init__(self, dataset):
        self.dataset, self.id, self.num_workers = dataset, 0, 3


def test_probe_samples_never_walks():
    class DS:
        def __init__(self):
            self.annotations = _Counting({"id": i, "file": f"img_{i}.jpg", "w": float(i)} for i in range(200_000))
            self.root = "/data"

    msg = probe.report(_Info(DS()))
    assert _Counting.reads <= probe.SAMPLE
    top = msg["attributes"][0]
    assert top["name"] == "annotations" and top["len"] == 200_000 and top["item_type"] == "dict"
    # A dict of 3 values and its float and str: ~350 bytes an item here; the estimate within 2x.
    assert 200_000 * 150 < top["bytes"] < 200_000 * 700
    validate(dict(msg))  # what the collector accepts


def test_probe_arrays_wrapped_datasets_and_what_raises():
    np = pytest.importorskip("numpy")

    class Bad(list):
        def __len__(self):
            raise RuntimeError("a user's container whose len() raises")

    class Inner:
        def __init__(self):
            self.labels = np.arange(1000)
            self.objs = np.array([str(i) for i in range(1000)], dtype=object)
            self.bad = Bad()

        def __getitem__(self, i):
            return i

    class Subset:
        def __init__(self):
            self.dataset, self.indices = Inner(), list(range(10))

        def __getitem__(self, i):
            return i

    rows = {r["name"]: r for r in probe.report(_Info(Subset()))["attributes"]}
    assert rows["dataset.labels"]["python_objects"] is False and rows["dataset.labels"]["bytes"] == 8000
    assert rows["dataset.objs"]["python_objects"] is True and rows["dataset.objs"]["objects"] == 1000
    assert rows["indices"]["len"] == 10


def test_probe_stops_at_its_budget():
    class Many:
        pass

    ds = Many()
    for i in range(150):
        setattr(ds, f"a{i}", [[j] * 20 for j in range(1000)])
    rows, truncated = probe.census(ds, time.perf_counter() - 1)  # the budget already spent
    assert rows == [] and truncated


def test_probe_stays_off_without_a_worker(start):
    # The main process imports torch and iterates a DataLoader without workers: no message.
    if not has_torch():
        pytest.skip("needs torch")
    run = start([sys.executable, script("copy_on_read.py"), "dicts", "1000", "0"])
    s = run.wait(120)
    assert s["exit"]["cause"] == "ok"
    rd = RunData(run.record_path)
    try:
        assert rd.events("dataset_objects") == []
    finally:
        rd.close()


# -- the words and the marks -------------------------------------------------------------------------------------
def _summary(cor_section, persistent=True, phases=()):
    return {
        "exit": {"cause": "ok", "message": "", "code": 0, "signal": None, "pid": 1, "traceback": None},
        "leak": {},
        "workers": {
            "at_peak_alive": 3,
            "max_alive": 3,
            "peak_pss_bytes": 900 * MiB,
            "persistent": persistent,
            "rss_at_peak_bytes": 1500 * MiB,
            "peak_at_s": 20,
        },
        "peak": {"tree_pss_bytes": 1200 * MiB, "tree_rss_bytes": 2000 * MiB, "at_s": 20},
        "phases": [{"name": p} for p in phases],
        "copy_on_read": cor_section,
    }


def test_advice_persistent_workers_only_with_a_validation():
    none = cor.CopyOnRead(False, reason="no").to_dict()
    plain = " ".join(a["text"] for a in advise(_summary(none)))
    assert "persistent_workers" not in plain and "num_workers" in plain
    with_eval = " ".join(a["text"] for a in advise(_summary(none, phases=("train", "eval"))))
    assert "persistent_workers=False (they hold their memory through validation)" in with_eval


def test_old_summaries_and_marks():
    # A record summarized before copy_on_read existed has no section: nothing is said, nothing is marked.
    assert all(a["topic"] != "copy_on_read" for a in advise(_summary(None)))
    procs = {101: {"role": "dataloader_worker", "rss": 1}}
    assert copy_on_read_marks(dict(procs), None) == procs
    found = cor.detect(_procs(), _series(200)).to_dict()
    marked = copy_on_read_marks({101: {"role": "dataloader_worker"}, 100: {"role": "main"}}, found)
    assert "copy_on_read" in marked[101] and "copy_on_read" not in marked[100]
    assert process_table(marked).count("⚠ copy-on-read") == 1


def test_the_live_state_keeps_each_workers_census():
    from memscope.model import Event
    from memscope.session.live import Snapshot

    snap = Snapshot()
    data = {
        "dataset": "Annotations",
        "attributes": [
            {
                "name": "annotations",
                "type": "list",
                "len": 3_000_000,
                "item_type": "dict",
                "bytes": 966_367_641,
                "python_objects": True,
            },
            {
                "name": "labels",
                "type": "ndarray",
                "len": 3_000_000,
                "item_type": "int64",
                "bytes": 24_000_000,
                "python_objects": False,
            },
        ],
    }
    snap.update(Event(3.0, 101, "dataset_objects", data), root_pid=100)
    top = snap.procs[101]["dataset_objects"]
    assert top["name"] == "annotations" and top["text"] == "list of 3,000,000 dict, ~0.9 GiB"


def test_rule_a_copy_that_stopped_rising_has_levelled_off():
    rounds = _series(200, until=40)  # the copy rises over 20 s, then holds for 18 s
    c = cor.detect(_procs(), rounds)
    assert c.detected and c.levelled and c.bound_bytes == c.tree_bytes and "levelled off" in c.text()
    rising = cor.detect(_procs(), rounds, until_s=15.0)
    assert rising.detected and not rising.levelled and rising.bound_bytes > rising.tree_bytes
