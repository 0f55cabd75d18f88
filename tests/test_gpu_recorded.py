"""GPU code paths fed with data recorded on real GPUs (tests/fixtures/gpu, README there: provenance, licences).

- CUDA memory snapshots: a transformer training step (216 segments, 13,524 MiB reserved, 1,314 MiB allocated;
  the fixture keeps every segment and the trace's last 1,200 events) and one taken at a real CUDA OOM (older
  format). The originals in ../shared/fixtures/gpu are used too where present.
- NVML: a fake NVML built from nvidia-smi captures (H100, H100 in MIG mode, Tesla T4): fake_nvml.py.
- CUDA OOM messages: the wordings public reports and PyTorch's documentation quote, numbers retyped.
"""

import json
import os
import pickle
import subprocess
import sys
import threading

import fake_nvml
import pytest
from conftest import has_torch, script

from memscope.analysis import gpu as g
from memscope.analysis import snapshot as S
from memscope.collect.gpu import Nvml, sample_loop

MiB, GiB = 1 << 20, 1 << 30
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures", "gpu")
SHARED = os.path.join(HERE, "..", "..", "shared", "fixtures", "gpu")
ROOT = os.path.dirname(HERE)
STEP = os.path.join(FIX, "snapshot_training_step_tail.pickle")
OOM = os.path.join(FIX, "snapshot_at_oom.pickle")
SNAPSHOTS = [STEP, OOM] + [
    p
    for p in (os.path.join(SHARED, "snapshot_training_step.pickle"), os.path.join(SHARED, "snapshot_at_oom.pickle"))
    if os.path.exists(p)
]
KEYS = [
    "device",
    "reserved_bytes",
    "allocated_bytes",
    "active_bytes",
    "free_in_segments_bytes",
    "largest_free_block_bytes",
    "segments",
    "trace_events",
]


def _plain(path):
    with open(path, "rb") as f:
        return pickle.load(f)  # the fixtures come from known sources (README): plain pickle is fine in tests


def _cli(*args, timeout=60):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [sys.executable, "-m", "memscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


# -- the snapshot: numbers, schema, advice ------------------------------------------------------------------------
@pytest.mark.parametrize("path", SNAPSHOTS, ids=os.path.basename)
def test_summary_equals_a_direct_sum_over_the_segments(path):
    raw = _plain(path)
    out = S.summarize(S.load(path))
    assert out["schema"] == "memscope.snapshot/1" and list(out) == ["schema", "devices", "advice"]
    (d,) = out["devices"]
    assert list(d) == KEYS
    segs = raw["segments"]
    free = [b["size"] for s in segs for b in s["blocks"] if b["state"] == "inactive"]
    assert d["reserved_bytes"] == sum(s["total_size"] for s in segs)
    assert d["allocated_bytes"] == sum(s["allocated_size"] for s in segs)
    assert d["active_bytes"] == sum(s["active_size"] for s in segs)
    assert d["free_in_segments_bytes"] == sum(free) == d["reserved_bytes"] - d["active_bytes"]
    assert d["largest_free_block_bytes"] == max(free)
    assert d["segments"] == len(segs) and d["trace_events"] == len(raw["device_traces"][0])


def test_the_recorded_numbers():
    step, oom = S.summarize(S.load(STEP))["devices"][0], S.summarize(S.load(OOM))["devices"][0]
    # As the fixtures README gives them: 13,524 MiB reserved / 1,314 MiB allocated; 11,296 / 11,292 MiB.
    assert step["reserved_bytes"] == 13524 * MiB and round(step["allocated_bytes"] / MiB) == 1314
    assert step["segments"] == 216 and step["largest_free_block_bytes"] == 314 * MiB
    assert oom["reserved_bytes"] == 11296 * MiB and round(oom["allocated_bytes"] / MiB) == 11292
    assert oom["segments"] == 176 and oom["trace_events"] == 1


def test_fragmentation_and_cache_vs_a_real_shortage():
    (step,) = S.summarize(S.load(STEP))["advice"]
    assert "expandable_segments:True" in step and "fragmentation" in step and "empty_cache" in step
    assert "13.21 GiB" in step and "314.00 MiB" in step
    (oom,) = S.summarize(S.load(OOM))["advice"]
    assert "real shortage" in oom and "not fragmentation" in oom and "batch size" in oom and ".detach()" in oom
    assert "PYTORCH_CUDA_ALLOC_CONF" not in oom  # reserved ≈ allocated: fragmentation is not to blame
    # memscope's own OOM snapshot says what was tried: it would have fitted in the cache, not in one block.
    snap = dict(S.load(STEP), memscope_oom={"device": 0, "alloc_bytes": 400 * MiB})
    (frag,) = S.summarize(snap)["advice"]
    assert "fragmentation caused this OOM" in frag and "400.00 MiB" in frag


def test_timeline_replays_the_trace_back_from_the_segments():
    snap = S.load(STEP)
    tl = S.timeline(snap, 0)
    d = S.device_summary(snap, 0)
    assert len(tl["x"]) == d["trace_events"] + 1 and tl["unit"] == "s" and tl["x"][0] == 0
    assert tl["allocated"][-1] == d["allocated_bytes"] and tl["reserved"][-1] == d["reserved_bytes"]
    assert min(tl["allocated"]) >= 0 and tl["peak_allocated_bytes"] <= d["reserved_bytes"]
    full = os.path.join(SHARED, "snapshot_training_step.pickle")
    if os.path.exists(full):  # the whole step: allocated climbs to 12.97 GiB and comes back to where it began
        t = S.timeline(S.load(full), 0)
        assert t["allocated"][0] == t["allocated"][-1] and round(t["peak_allocated_bytes"] / MiB) == 13283
    older = S.timeline(S.load(OOM), 0)  # no time_us before 2.1: the x axis counts events
    assert older["unit"] == "event" and older["allocated"] == [S.device_summary(S.load(OOM), 0)["allocated_bytes"]] * 2


def test_largest_allocations_carry_their_frames_in_both_formats():
    top = S.largest_allocations(S.load(STEP), 0, 3)
    assert top[0]["size"] == 327680000 and top[0]["frames"][0]["name"] == "einsum"
    assert [f["filename"].rsplit("\\", 1)[-1] for f in S.user_frames(top[0]["frames"])][:1] == ["model.py"]
    old = S.largest_allocations(S.load(OOM), 0, 1)[0]  # frames under the block's "history"
    assert old["frames"][0] == {
        "name": "allocate",
        "filename": "/home/dingyiran/FlexGen/flexgen/pytorch_backend.py",
        "line": 190,
    }


def test_allocator_fields_from_a_recorded_snapshot_feed_the_allocator_verdict():
    snap = S.load(STEP)
    stats = S.allocator_stats(snap, 0)
    a = g.allocator([{"t": 1.0, "pid": 7, "data": dict(stats, backend="cuda", device=0)}])
    (d,) = a["devices"]
    assert d["last_reserved_bytes"] == 13524 * MiB
    assert d["reserved_unallocated_bytes"] == 13524 * MiB - stats["allocated"]
    # Only 982 MiB (7%) sits in split segments: whole free segments are cache, not fragmentation.
    assert round(d["inactive_split_bytes"] / MiB) == 982 and d["advice"] is None


# -- the safe reader -----------------------------------------------------------------------------------------------
class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_names_a_global_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "x": _Evil(str(marker))}))
    for args in ([str(evil)], [str(evil), "--json"], [str(evil), "--html", str(tmp_path / "o.html")]):
        r = _cli("snapshot", *args)
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and "refused" in r.stderr and "system" in r.stderr
    assert not marker.exists() and not (tmp_path / "o.html").exists()
    with pytest.raises(S.SnapshotError, match="refused"):
        S.loads(pickle.dumps({"segments": [], "d": __import__("collections").OrderedDict()}))


@pytest.mark.parametrize(
    "content,why",
    [
        (b"not a pickle", "not a pickle"),
        (pickle.dumps([1, 2, 3]), "not a CUDA memory snapshot"),
        (pickle.dumps({"segments": "x"}), "not a CUDA memory snapshot"),
        (None, "No such file"),
    ],
    ids=["bytes", "list", "segments-str", "missing"],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, why):
    path = tmp_path / "s.pickle"
    if content is not None:
        path.write_bytes(content)
    r = _cli("snapshot", str(path), "--json")
    assert r.returncode == 2 and r.stdout == "" and why in r.stderr and len(r.stderr.strip().splitlines()) == 1


# -- the CLI and the views -----------------------------------------------------------------------------------------
def test_cli_json_and_html(tmp_path):
    r = _cli("snapshot", OOM, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == S.summarize(S.load(OOM))
    # A frame name from the file is escaped in the page, in the table and in Bokeh's data alike.
    snap = _plain(STEP)
    blk = max((b for s in snap["segments"] for b in s["blocks"] if b["frames"]), key=lambda b: b["size"])
    blk["frames"].insert(0, {"name": "<script>alert(1)</script>", "filename": "/x/<b>evil</b>.py", "line": 1})
    hostile = tmp_path / "hostile.pickle"
    hostile.write_bytes(pickle.dumps(snap))
    out = tmp_path / "snap.html"
    r = _cli("snapshot", str(hostile), "--html", str(out))
    assert r.returncode == 0, r.stderr
    page = out.read_text()
    assert "<script>alert(1)" not in page and "<b>evil</b>" not in page and "&lt;script&gt;alert(1)" in page
    assert "memscope-snapshot-timeline-0" in page and "memscope-snapshot-segments-0" in page
    assert "cdn.bokeh.org" not in page and "Bokeh" in page  # BokehJS inline
    assert "expandable_segments:True" in page and "13.21 GiB" in page


def test_open_snapshot_in_a_notebook():
    pytest.importorskip("anywidget")
    import memscope

    view = memscope.open_snapshot(STEP)
    assert view.summary == S.summarize(S.load(STEP)) and view.advice == view.summary["advice"]
    chart, table = view.widget.children
    assert chart.data["main_rss"]["y"][-1] == view.summary["devices"][0]["allocated_bytes"]
    assert chart.data["tree_rss"]["y"][-1] == 13524 * MiB and chart.data["labels"]["main_rss"] == "allocated"
    assert "largest allocations" in table.value and "model.py:39 in forward" in table.value
    assert "cuda:0 reserved 13.21 GiB" in repr(view)


# -- NVML: a fake built from nvidia-smi captures -------------------------------------------------------------------
def _table_mib(section, pattern):
    import re

    return [int(x) * MiB for x in re.findall(pattern, section)]


def _sections(name):
    return fake_nvml.sections(os.path.join(FIX, f"nvidia-smi_{name}_sections.txt"))


def test_nvml_h100_under_load_per_process():
    secs = _sections("h100")
    apps = fake_nvml.compute_apps(secs["load :: query-compute-apps (per-process)"])  # the CSV, another print
    ((used, total),) = [
        tuple(_table_mib(line, r"(\d+)MiB"))
        for line in secs["load :: nvidia-smi (default table)"].splitlines()
        if "MiB /" in line
    ]
    nv = Nvml.open(fake_nvml.FakeNvml(fake_nvml.capture("h100", "load")))
    tree = [11345, 11327]  # gpu_burn and one memhog are ours; the other memhog is another container's
    s = nv.sample(tree)
    (dev,) = s["devices"]
    assert dev["name"] == "NVIDIA H100 80GB HBM3" and dev["total"] == total == 81559 * MiB
    assert dev["used"] == used == 19818 * MiB and dev["reserved"] == 479 * MiB
    assert {p["pid"]: p["used"] for p in s["procs"]} == {pid: apps[pid] for pid in tree}
    assert s["other_procs"] == 1 and s["other_used"] == apps[11328] == 1542 * MiB
    assert (
        nv.sample([])["procs"] == []
        and Nvml.open(fake_nvml.FakeNvml(fake_nvml.capture("h100", "idle"))).sample(tree)["procs"] == []
    )


@pytest.mark.parametrize("privileged", [True, False])
def test_nvml_mig_instances_each_with_their_memory_and_processes(privileged):
    secs = _sections("h100-mig")
    apps = fake_nvml.compute_apps(secs["load :: query-compute-apps (per-process)"])
    table = secs["load :: nvidia-smi (default table)"]
    mig_rows = [
        (int(a) * MiB, int(b) * MiB)
        for a, b in __import__("re").findall(r"\|\s+0\s+\d+\s+0\s+\d\s+\|\s+(\d+)MiB /\s+(\d+)MiB", table)
    ]
    fake = fake_nvml.FakeNvml(fake_nvml.capture("h100-mig", "load"), privileged=privileged)
    s = Nvml.open(fake).sample([21198, 21180])
    assert [(d["used"], d["total"]) for d in s["devices"]] == mig_rows  # 11091/40448 MiB, 17/20096, 9/9984 x2
    assert [d["gpu_instance"] for d in s["devices"]] == [2, 3, 9, 10]
    assert {p["pid"]: (p["used"], p["mig"]) for p in s["procs"]} == {21198: (apps[21198], 0), 21180: (apps[21180], 0)}
    assert s["other_procs"] == 1 and s["other_used"] == apps[21181]


def test_nvml_t4_graphics_process_of_another_user_and_old_driver():
    fake = fake_nvml.FakeNvml(fake_nvml.capture("t4"))
    s = Nvml.open(fake).sample([5762])
    (dev,) = s["devices"]
    assert (dev["total"], dev["used"], dev["reserved"]) == (15360 * MiB, 1032 * MiB, 388 * MiB)
    assert s["procs"] == [{"pid": 5762, "device": 0, "used": 1005 * MiB}]
    assert s["other_procs"] == 1 and s["other_used"] == 22 * MiB  # Xorg, type G
    # A driver before R510: no v2 call; v1's used is total - free, the driver's reservation in it.
    old = Nvml.open(fake_nvml.FakeNvml(fake_nvml.capture("t4"), v2=False)).sample([5762])["devices"][0]
    assert old["used"] == (15360 - 13939) * MiB and old["reserved"] is None


@pytest.mark.parametrize("raw", [False, True])
def test_nvml_not_available_per_process_memory(raw):
    fake = fake_nvml.FakeNvml(fake_nvml.capture("t4"), not_available=True, raw_sentinel=raw)
    s = Nvml.open(fake).sample([5762])
    assert s["procs"] == [{"pid": 5762, "device": 0, "used": None}] and s["other_used"] == 0
    # The summary says which processes NVML could not measure, and uses PyTorch's numbers for them instead.
    agent = [{"t": 1.0, "pid": 5762, "data": dict(S.allocator_stats(S.load(OOM), 0), backend="cuda", device=0)}]
    out = g.gpu([{"t": 1.0, "pid": None, "data": s}], {5762: "main"}, agent)
    assert out["not_available_pids"] == [5762] and out["source"] == "agent" and not out["pid_mismatch"]
    assert out["processes"] == [{"pid": 5762, "role": "main", "peak_used_bytes": 11296 * MiB}]


def test_nvml_memory_not_supported_keeps_the_processes():
    class NoMemory(fake_nvml.FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, h, version=None):
            raise self._err(fake_nvml.pynvml.NVML_ERROR_NOT_SUPPORTED)

    s = Nvml.open(NoMemory(fake_nvml.capture("h100", "load"))).sample([11345])
    assert s["devices"][0]["used"] is None and s["procs"] == [{"pid": 11345, "device": 0, "used": 15690 * MiB}]
    out = g.gpu([{"t": 1.0, "pid": None, "data": s}], {11345: "main"})
    assert out["devices"][0]["peak_used_bytes"] == 0 and out["processes"][0]["peak_used_bytes"] == 15690 * MiB


def test_nvml_absent_driver_opens_nothing():
    fake = fake_nvml.FakeNvml(fake_nvml.capture("t4"), driver_loaded=False)
    assert Nvml.open(fake) is None


def test_nvml_rounds_to_summary_chart_and_process_table():
    pytest.importorskip("ipywidgets")
    from memscope.ui.fragments import process_table, with_gpu
    from memscope.ui.gpu_chart import GpuSeries

    nv = Nvml.open(fake_nvml.FakeNvml(fake_nvml.capture("h100", "load")))
    rounds, done = [], threading.Event()

    def publish(ev):
        rounds.append(ev)
        if len(rounds) == 3:
            done.set()

    tree = {11345: "main", 11327: "dataloader_worker"}
    sample_loop(nv, publish, lambda: float(len(rounds)), lambda: list(tree), done, 0.001)
    out = g.gpu([{"t": e.t, "pid": e.pid, "data": e.data} for e in rounds], tree)
    assert out["source"] == "nvml" and out["tree_peak_bytes"] == (15690 + 2566) * MiB
    assert [(p["pid"], p["role"], p["peak_used_bytes"]) for p in out["processes"]] == [
        (11345, "main", 15690 * MiB),
        (11327, "dataloader_worker", 2566 * MiB),
    ]
    assert out["other_processes"] == 1 and out["other_peak_used_bytes"] == 1542 * MiB
    assert out["devices"][0]["driver_reserved_bytes"] == 479 * MiB
    series = GpuSeries()
    for e in rounds:
        series.add(e)
    snap = series.snapshot(tree)
    assert snap["tree_pss_by_role"]["main"]["y"][-1] == 15690 * MiB
    assert snap["limit"]["y"][-1] == 81559 * MiB and snap["host_available"]["y"][-1] == (81559 - 19818) * MiB
    html = process_table(
        with_gpu(
            {11345: {"role": "main", "rss": GiB}, 11327: {"role": "dataloader_worker"}, 99: {"role": "wrapper"}},
            series.per_pid(),
        )
    )
    assert "<th style='text-align:left;padding-right:10px'>GPU</th>" in html
    assert "15.32 GiB" in html and "2.51 GiB" in html
    assert "GPU" not in process_table({99: {"role": "main"}})  # no GPU data: no column
    from memscope.ui.report import gpu_peaks  # the HTML report's table: each process's peak from the summary

    rows = with_gpu({p: {"role": r} for p, r in tree.items()}, gpu_peaks({"gpu": out}))
    assert rows[11345]["gpu"] == 15690 * MiB and rows[11327]["gpu"] == 2566 * MiB


# -- CUDA OOM messages ---------------------------------------------------------------------------------------------
# Retyped from where they were published: the fixtures README (seed 003's Kaggle run), PyTorch's documentation
# (its fragmentation example), public issue reports (2.1.x's "capacty"; several processes; the 1.x wordings).
README_21 = (
    "CUDA out of memory. Tried to allocate 226.00 MiB. GPU 0 has a total capacity of 15.89 GiB of which "
    "3.12 MiB is free. Process 5691 has 15.67 GiB memory in use. Of the allocated memory ..."
)
DOCS_FRAG = (
    "CUDA out of memory. Tried to allocate 3.15 GiB. GPU 0 has a total capacity of 39.56 GiB of which "
    "6.80 GiB is free. Including non-PyTorch memory, this process has 36.61 GiB memory in use. Of the "
    "allocated memory 31.66 GiB is allocated by PyTorch, and 4.11 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
WRAPPED_TWO = (
    "CUDA out of memory. Tried to allocate 1.16 GiB.\nGPU 0 has a total capacity of 31.36 GiB of which "
    "471.69 MiB is free.\nIncluding non-PyTorch memory, this process has 16.63 GiB memory in use.\n"
    "Process 19239 has 14.26 GiB memory in use.\nOf the allocated memory 15.03 GiB is allocated by "
    "PyTorch, and 1.00 GiB\nis reserved by PyTorch but unallocated."
)
CAPACTY = (
    "CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacty of 23.69 GiB of which 7.11 GiB "
    "is free. Process 2006998 has 256.00 MiB memory in use. Including non-PyTorch memory, this process has "
    "16.31 GiB memory in use. Of the allocated memory 16.01 GiB is allocated by PyTorch, and 7.47 MiB is "
    "reserved by PyTorch but unallocated."
)
SEED_003 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 226.00 MiB\n"
    "Process 5691 has 15.67 GiB memory in use"
)  # as seed 003 quotes it: two lines of the message
OLDER = (
    "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.69 GiB already "
    "allocated; 19.12 MiB free; 9.80 GiB reserved in total by PyTorch)"
)
CACHED = (
    "CUDA out of memory. Tried to allocate 144.00 MiB (GPU 0; 11.17 GiB total capacity; 10.62 GiB already "
    "allocated; 145.81 MiB free; 10.66 GiB cached)"
)

# Printed by torch 2.11.0+cu130 on a real NVIDIA H200 (benchmarks/gpu_device.py, check oom_card, 2026-11-27) for a
# process capped by torch.cuda.set_per_process_memory_fraction(0.02): "2.80 GiB allowed;" is the cap.
H200_CAPPED = (
    "CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 137.29 GiB "
    "is free. Including non-PyTorch memory, this process has 2.51 GiB memory in use. 2.80 GiB allowed; Of the "
    "allocated memory 2.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)


def _b(x, unit):
    return int(x * {"MiB": MiB, "GiB": GiB}[unit])


@pytest.mark.parametrize(
    "text,want",
    [
        (
            README_21,
            {
                "alloc": _b(226, "MiB"),
                "total": _b(15.89, "GiB"),
                "free": _b(3.12, "MiB"),
                "processes": [(5691, _b(15.67, "GiB"))],
                "form": "2.1+",
            },
        ),
        (
            DOCS_FRAG,
            {
                "alloc": _b(3.15, "GiB"),
                "total": _b(39.56, "GiB"),
                "free": _b(6.80, "GiB"),
                "this_process": _b(36.61, "GiB"),
                "allocated": _b(31.66, "GiB"),
                "reserved_unallocated": _b(4.11, "GiB"),
                "form": "2.1+",
            },
        ),
        (
            WRAPPED_TWO,
            {
                "alloc": _b(1.16, "GiB"),
                "free": _b(471.69, "MiB"),
                "this_process": _b(16.63, "GiB"),
                "processes": [(19239, _b(14.26, "GiB"))],
                "reserved_unallocated": _b(1.00, "GiB"),
            },
        ),
        (
            CAPACTY,
            {
                "total": _b(23.69, "GiB"),
                "free": _b(7.11, "GiB"),
                "processes": [(2006998, _b(256, "MiB"))],
                "this_process": _b(16.31, "GiB"),
                "allocated": _b(16.01, "GiB"),
            },
        ),
        (
            OLDER,
            {
                "alloc": _b(20, "MiB"),
                "total": _b(10.76, "GiB"),
                "allocated": _b(9.69, "GiB"),
                "free": _b(19.12, "MiB"),
                "reserved": _b(9.80, "GiB"),
                "form": "older",
            },
        ),
        (CACHED, {"alloc": _b(144, "MiB"), "free": _b(145.81, "MiB"), "reserved": _b(10.66, "GiB"), "form": "older"}),
        (SEED_003, {"alloc": _b(226, "MiB"), "processes": [(5691, _b(15.67, "GiB"))], "total": None, "form": "2.1+"}),
    ],
    ids=["2.1-readme", "2.1-docs", "2.1-wrapped", "2.1.x-capacty", "1.5-2.0", "before-1.5", "seed-003-excerpt"],
)
def test_parse_every_oom_wording(text, want):
    n = g.parse_cuda_oom(text)
    assert {k: n.get(k) for k in want} == want and n.get("device", 0) == 0


def test_oom_summary_names_each_process_and_whether_it_is_ours():
    exc = {"type": "torch.OutOfMemoryError", "message": WRAPPED_TWO}
    o = g.cuda_oom({100: exc}, {}, {100: "rank", 19239: "rank"}, main=100)
    assert (o["tried_bytes"], o["capacity_bytes"], o["free_bytes"]) == (
        _b(1.16, "GiB"),
        _b(31.36, "GiB"),
        _b(471.69, "MiB"),
    )
    assert o["processes"] == [
        {"pid": 100, "used_bytes": _b(16.63, "GiB"), "in_tree": True, "role": "rank", "this_process": True},
        {"pid": 19239, "used_bytes": _b(14.26, "GiB"), "in_tree": True, "role": "rank", "this_process": False},
    ]
    assert not o["host_pids"]
    other = g.cuda_oom({100: exc}, {}, {100: "main"}, main=100)
    assert other["processes"][1]["in_tree"] is False and "Other processes held 14.26 GiB" in other["advice"]
    frag = g.cuda_oom({7: {"type": "torch.OutOfMemoryError", "message": DOCS_FRAG}}, {}, {7: "main"}, main=7)
    assert "fragmentation" in frag["advice"] and "expandable_segments:True" in frag["advice"]
    # Seed 003 (Kaggle): the only pid listed is not the run's -- NVML's host pid of this very process.
    seed = g.cuda_oom({7: {"type": "torch.OutOfMemoryError", "message": README_21}}, {}, {7: "main"}, main=7)
    assert seed["host_pids"] and "real shortage" in seed["advice"] and "host pid" in seed["advice"]
    old = g.cuda_oom({7: {"type": "RuntimeError", "message": OLDER}}, {}, {7: "main"})  # PyTorch < 1.13
    assert old["form"] == "older" and old["reserved_unallocated_bytes"] == _b(9.80, "GiB") - _b(9.69, "GiB")
    assert g.cuda_oom({7: {"type": "ValueError", "message": "CUDA out of memory"}}, {}, {}) is None


def test_an_oom_under_a_per_process_cap_says_the_cap_not_the_device():
    """On the H200 the card said "(137.29 GiB free of 2.80 GiB)" and "a real shortage": the observer's "device
    total" is torch's allowed maximum under a cap. The device's capacity is the message's; the cap is said apart."""
    n = g.parse_cuda_oom(H200_CAPPED)
    assert (n["total"], n["allowed"], n["free"], n["alloc"]) == (
        _b(139.80, "GiB"),
        _b(2.80, "GiB"),
        _b(137.29, "GiB"),
        _b(1024, "MiB"),
    )
    exc = {7: {"type": "torch.OutOfMemoryError", "message": H200_CAPPED}}
    for observed in ({}, {7: {"device": 0, "alloc_bytes": GiB, "device_total": _b(2.80, "GiB")}}):
        o = g.cuda_oom(exc, observed, {7: "main"}, main=7)
        assert o["capacity_bytes"] == _b(139.80, "GiB") and o["allowed_bytes"] == _b(2.80, "GiB")
        assert "real shortage" not in o["advice"] and "set_per_process_memory_fraction" in o["advice"]
        assert "may use 2.80 GiB" in o["advice"] and "held 2.51 GiB" in o["advice"]
        m = g.cuda_oom_message(H200_CAPPED, "oom.py, line 7 in <module>", observed.get(7))
        assert "(137.29 GiB free of 139.80 GiB), over this process's cap of 2.80 GiB" in m, m
    # Without a cap nothing changes: the device's capacity, and a real shortage.
    plain = g.cuda_oom({7: {"type": "torch.OutOfMemoryError", "message": README_21}}, {}, {7: "main"}, main=7)
    assert plain["allowed_bytes"] is None and "real shortage" in plain["advice"]
    assert "cap" not in g.cuda_oom_message(DOCS_FRAG)


def test_the_retry_before_an_oom_is_not_called_a_stall():
    """The H200's capped run: one OOM, alloc_retries 1 (the allocator frees its cache and tries once more before it
    raises), and the card said "cudaMalloc failed 1 times ... each retry stalls training"."""
    oom = {"t": 4.0, "pid": 10, "data": {"device": 0, "alloc_bytes": GiB, "device_total": _b(2.80, "GiB")}}
    sample = {"t": 4.1, "pid": 10, "data": {"backend": "cuda", "device": 0, "allocated": 2 * GiB, "reserved": 2 * GiB}}
    one = g.allocator([dict(sample, data=dict(sample["data"], alloc_retries=1, ooms=0))], [oom])
    assert one["devices"][0]["advice"] is None and one["advice"] is None
    three = g.allocator([dict(sample, data=dict(sample["data"], alloc_retries=3, ooms=1))], [oom])
    assert "cudaMalloc failed 2 times" in three["devices"][0]["advice"]


# -- a run's OOM on CPU, the recorded snapshot where the device would be -----------------------------------------
@pytest.mark.skipif(not has_torch(), reason="needs torch")
@pytest.mark.parametrize("history", [None, 500])
def test_a_cuda_oom_saves_the_snapshot_beside_the_record(start, history):
    run = start([script("cuda_oom_recorded.py"), OOM], cuda_history=history)
    s = run.wait(120)
    assert s["exit"]["cause"] == "cuda_oom" and "226.00 MiB failed on GPU 0" in s["exit"]["message"]
    out = "\n".join(run.output_tail)
    assert "observers 1" in out
    # History costs memory on every allocation: recorded only when asked, with the entries asked for.
    assert (f"'max_entries': {history}" in out) if history else "history []" in out
    o = s["cuda_oom"]
    path = o["snapshot"]
    assert path and os.path.dirname(path) == os.path.dirname(s["record"]) and os.path.exists(path)
    assert (o["tried_bytes"], o["free_bytes"]) == (226 * MiB, int(3.12 * MiB)) and o["reserved_bytes"] == 11296 * MiB
    assert (
        o["processes"]
        == [{"pid": 5691, "used_bytes": _b(15.67, "GiB"), "in_tree": False, "role": None, "this_process": False}]
        and o["host_pids"]
    )
    assert s["allocator"]["ooms"][0]["snapshot"] == path
    saved = S.load(path)  # what the agent wrote reads back safely, the OOM's numbers in it
    assert saved["memscope_oom"]["alloc_bytes"] == 226 * MiB and saved["segments"] == _plain(OOM)["segments"]
    (adv,) = S.summarize(saved)["advice"]
    assert "this OOM is a real shortage" in adv
    from memscope.ui.fragments import verdict_card

    card = verdict_card(s)
    assert "memscope.open_snapshot(" in card and path in card and "memscope snapshot" in card


# -- the notebook view in a real browser (JupyterLab + chromium) --------------------------------------------------
def test_open_snapshot_draws_in_a_real_browser(tmp_path):
    tb = pytest.importorskip("test_browser")  # its module-level skips apply: JupyterLab, Playwright, chromium
    cells = [
        f"import memscope\nv = memscope.open_snapshot({STEP!r})\nv",
        "import time\nfrom memscope.ui.chart import count_points\ntime.sleep(2)\nc = v.widget.children[0]\n"
        "print('POINTS', c.rendered_points, count_points(c.data))",
    ]
    proc, url = tb._serve(tmp_path, "lab", cells, tb.PORT + 5)
    try:
        with tb.playwright.sync_playwright() as p:
            browser = tb._launch(p)
            page = tb.open_notebook(browser, url, 1280, 1100)
            tb.run_cell(page, 0)
            tb.wait_text(page, ".memscope-snapshot", "largest allocations", "expandable_segments:True", timeout=90_000)
            tb.run_cell(page, 1)
            m = tb.wait_output(page, 1, r"POINTS (\d+) (\d+)")
            assert int(m.group(1)) == int(m.group(2)) > 0  # the timeline drawn, every point
            bars = page.evaluate("() => document.querySelectorAll('.memscope-segments > div').length")
            assert bars == 216  # one bar per recorded segment
            page.screenshot(path=str(tmp_path / "open_snapshot.png"), full_page=True)
            browser.close()
    finally:
        tb._shutdown(proc)


@pytest.mark.skipif(not has_torch(), reason="needs torch")
def test_without_an_oom_observer_the_excepthook_saves_the_snapshot(start):
    run = start([script("cuda_oom_recorded.py"), OOM, "--no-observer"])
    s = run.wait(120)
    assert s["exit"]["cause"] == "cuda_oom" and "observers 0" in "\n".join(run.output_tail)
    path = s["cuda_oom"]["snapshot"]
    assert path and os.path.exists(path) and s["allocator"] is None  # no observer: no cuda_oom message
    saved = S.load(path)
    assert saved["segments"] == _plain(OOM)["segments"] and "alloc_bytes" not in saved["memscope_oom"]
    from memscope.ui.fragments import verdict_card

    assert path in verdict_card(s)
