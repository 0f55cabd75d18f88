"""GPU: NVML on the collector's side, the allocator/GPU/compile-pool analysis, and the CUDA OOM exit cause.

CI has no GPU (benchmarks/gpu_device.py ran these paths once on an H200: BENCHMARKS.md). Here: NVML's absence is
tested for real (and its presence wherever a driver is found); some pure analysis functions are tested on inputs
HAND-WRITTEN from the shapes PyTorch and NVML document (memory_stats keys, the OOM observer's arguments, the
OutOfMemoryError wording); and the CUDA OOM exit cause is decided from a real torch.OutOfMemoryError raised in a
real subprocess on CPU. The same paths fed with data recorded on real GPUs (snapshots, nvidia-smi captures,
published OOM messages) are in test_gpu_recorded.py.
"""

import threading
import time

import pytest
from conftest import has_torch, script

from memscope.analysis import gpu as g
from memscope.collect.gpu import Nvml, sample_loop

MiB, GiB = 1 << 20, 1 << 30


def _nvml_driver_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


# -- NVML, for real -----------------------------------------------------------------------------------------------
@pytest.mark.skipif(_nvml_driver_present(), reason="a GPU driver is present: see test_nvml_samples_devices")
def test_without_a_driver_nvml_is_silent_and_the_run_is_normal(start):
    assert Nvml.open() is None
    run = start([script("clean.py"), "3"])
    # NVML is tried on its own thread (off the start's path); without a driver that thread ends at once.
    deadline = time.monotonic() + 10
    while "memscope-gpu" in [t.name for t in threading.enumerate()] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "memscope-gpu" not in [t.name for t in threading.enumerate()]
    assert not run.ended  # the thread ended while the run went on: it did not just end with the run
    s = run.wait(60)
    assert s["exit"]["cause"] == "ok"
    assert s["gpu"] is None and s["allocator"] is None and s["compile_pool"] is None
    from memscope.record.reader import RunData

    rd = RunData(s["record"])
    try:
        assert rd.events("gpu") == []
    finally:
        rd.close()


@pytest.mark.skipif(not _nvml_driver_present(), reason="no NVIDIA driver here")
def test_nvml_samples_devices():
    nv = Nvml.open()
    assert nv is not None
    try:
        data = nv.sample([])
        assert data["devices"] and all(d["total"] > 0 and 0 <= d["used"] <= d["total"] for d in data["devices"])
        assert data["procs"] == []  # an empty tree owns nothing
    finally:
        nv.close()


class _FailingNvml:
    closed = False

    def sample(self, pids):
        raise RuntimeError("GPU is lost")

    def close(self):
        self.closed = True


def test_a_failing_nvml_goes_quiet_and_closes():
    nv, published, done = _FailingNvml(), [], threading.Event()
    sample_loop(
        nv, published.append, lambda: 0.0, lambda: [], done, 0.001
    )  # returns: never raises, never loops forever
    assert published == [] and nv.closed


# -- allocator (inputs hand-written from torch.cuda.memory_stats' documented keys) ------------------------------
def _alloc(t, pid, **fields):
    return {"t": t, "pid": pid, "data": dict({"backend": "cuda", "device": 0}, **fields)}


def test_allocator_peaks_fragmentation_and_retries():
    samples = [
        _alloc(1.0, 10, allocated=2 * GiB, reserved=3 * GiB, inactive_split=200 * MiB, alloc_retries=0),
        _alloc(
            3.0,
            10,
            allocated=4 * GiB,
            peak_allocated=5 * GiB,
            reserved=8 * GiB,
            inactive_split=3 * GiB,
            alloc_retries=2,
            ooms=0,
        ),
        _alloc(5.0, 10, allocated=3 * GiB, reserved=7 * GiB, inactive_split=1 * GiB, alloc_retries=2),
    ]
    a = g.allocator(samples)
    (d,) = a["devices"]
    assert d["pid"] == 10 and d["samples"] == 3
    assert d["peak_allocated_bytes"] == 5 * GiB and d["peak_reserved_bytes"] == 8 * GiB
    assert d["last_reserved_bytes"] == 7 * GiB and d["reserved_unallocated_bytes"] == 4 * GiB
    assert d["fragmentation"] == pytest.approx(3 / 8, abs=1e-3) and d["inactive_split_bytes"] == 3 * GiB
    assert d["alloc_retries"] == 2
    assert "expandable_segments:True" in d["advice"] and "3.00 GiB" in d["advice"]
    assert a["ooms"] == [] and a["advice"] == d["advice"]  # lifted into the summary's advice


def test_allocator_retries_without_fragmentation_and_a_quiet_device():
    a = g.allocator(
        [
            _alloc(1.0, 10, allocated=1 * GiB, reserved=1 * GiB, alloc_retries=3),
            _alloc(1.0, 11, allocated=1 * GiB, reserved=1 * GiB),
        ]
    )
    busy, quiet = a["devices"]
    assert "cudaMalloc failed 3 times" in busy["advice"]
    assert quiet["advice"] is None and quiet["fragmentation"] == 0
    assert a["advice"] == busy["advice"]
    assert g.allocator([]) is None


def test_allocator_keeps_the_oom_and_where_its_snapshot_went():
    oom = {
        "t": 9.5,
        "pid": 10,
        "data": {
            "device": 0,
            "alloc_bytes": 226 * MiB,
            "device_total": 16 * GiB,
            "device_free": 120 * MiB,
            "reserved": 15 * GiB,
            "allocated": 14 * GiB,
            "snapshot": "cuda_snapshot_10_1.pickle",
        },
    }
    a = g.allocator([], [oom], {"cuda_snapshot_10_1.pickle": "/runs/r.cuda_snapshot_10_1.pickle"})
    (o,) = a["ooms"]
    assert o["alloc_bytes"] == 226 * MiB and o["reserved_bytes"] == 15 * GiB
    assert o["snapshot"] == "/runs/r.cuda_snapshot_10_1.pickle"


def test_mps_rows_carry_driver_memory():
    a = g.allocator(
        [{"t": 1.0, "pid": 3, "data": {"backend": "mps", "device": 0, "allocated": 1 * GiB, "driver": 3 * GiB}}]
    )
    (d,) = a["devices"]
    assert d["backend"] == "mps" and d["peak_driver_bytes"] == 3 * GiB and "peak_reserved_bytes" not in d


# -- gpu (NVML rounds shaped as collect.gpu.Nvml.sample returns them) ---------------------------------------------
def _round(t, procs, other=0, used=10 * GiB):
    return {
        "t": t,
        "pid": None,
        "data": {
            "devices": [{"index": 0, "name": "GPU", "total": 80 * GiB, "used": used}],
            "procs": procs,
            "other_procs": other,
        },
    }


def test_gpu_per_process_from_nvml():
    rounds = [
        _round(1, [{"pid": 10, "device": 0, "used": 2 * GiB}, {"pid": 11, "device": 0, "used": 1 * GiB}]),
        _round(2, [{"pid": 10, "device": 0, "used": 5 * GiB}], used=20 * GiB),
    ]
    out = g.gpu(rounds, {10: "main", 11: "rank"})
    assert out["source"] == "nvml" and not out["pid_mismatch"]
    assert out["devices"][0]["peak_used_bytes"] == 20 * GiB and out["devices"][0]["last_used_bytes"] == 20 * GiB
    assert out["processes"][0] == {"pid": 10, "role": "main", "peak_used_bytes": 5 * GiB, "device": 0}
    assert out["tree_peak_bytes"] == 5 * GiB


def test_gpu_in_a_container_falls_back_to_the_agent():
    # NVML lists GPU processes by host pid: none is the tree's. The agent's reserved bytes stand in.
    rounds = [_round(1, [], other=2), _round(2, [], other=2)]
    agent = [_alloc(1.0, 10, reserved=6 * GiB, peak_reserved=7 * GiB)]
    out = g.gpu(rounds, {10: "main"}, agent)
    assert out["source"] == "agent" and out["pid_mismatch"]
    assert out["processes"] == [{"pid": 10, "role": "main", "peak_used_bytes": 7 * GiB}]
    assert g.gpu([], {}) is None
    # A CPU-only run on a shared GPU machine: other users' GPU processes are no pid mismatch.
    idle = g.gpu(rounds, {10: "main"})
    assert idle["source"] == "nvml" and not idle["pid_mismatch"] and idle["processes"] == []


# -- compile pool --------------------------------------------------------------------------------------------------
SIDECAR = "/venv/bin/python /venv/lib/python3.11/site-packages/torch/_inductor/compile_worker/__main__.py --kind=fork"


def _procs(n_workers):
    # The default (subprocess) pool: the main, inductor's sidecar, and the workers the sidecar forks.
    out = [
        {"pid": 1, "ppid": 0, "role": "main", "cmdline": "python train.py"},
        {"pid": 2, "ppid": 1, "role": "compile_worker", "cmdline": SIDECAR},
    ]
    return out + [{"pid": 10 + i, "ppid": 2, "role": "compile_worker", "cmdline": SIDECAR} for i in range(n_workers)]


def test_compile_pool_forked_from_the_main_has_no_sidecar():
    # TORCHINDUCTOR_WORKER_START=fork: the workers are the main's children (the agent tells their role).
    procs = [{"pid": 1, "ppid": 0, "role": "main", "cmdline": "python train.py"}] + [
        {"pid": 10 + i, "ppid": 1, "role": "compile_worker", "cmdline": "python train.py"} for i in range(2)
    ]
    p = g.compile_pool(procs, [1.0], [GiB], [])
    assert p["processes"] == 2 and p["workers"] == 2 and "sidecar" not in p["advice"]


def _compile(t, state, pid=1):
    return {"t": t, "pid": pid, "data": {"state": state, "compile_threads": 20, "env": None}}


def test_compile_pool_alive_after_compilation_names_the_setting():
    t = [float(i) for i in range(0, 100, 2)]
    p = g.compile_pool(_procs(20), t, [8 * GiB] * len(t), [_compile(5, "start"), _compile(30, "end")])
    assert p["processes"] == 21 and p["workers"] == 20 and p["peak_pss_bytes"] == 8 * GiB
    assert p["compilations"] == 1 and p["compile_s"] == 25 and p["last_compile_end_s"] == 30
    assert p["alive_after_compile"] is True and p["alive_s_after_compile"] == 68
    assert p["compile_threads"] == 20
    assert "TORCHINDUCTOR_COMPILE_THREADS=1" in p["advice"] and "8.00 GiB" in p["advice"]


def test_compile_pool_gone_after_compilation():
    t = [float(i) for i in range(0, 40, 2)]
    pss = [1 * GiB if x <= 31 else 0 for x in t]
    p = g.compile_pool(_procs(2), t, pss, [_compile(5, "start"), _compile(30, "end")])
    assert p["alive_after_compile"] is False and p["alive_s_after_compile"] == 0


def test_compile_pool_unknown_without_compile_events_and_none_without_a_pool():
    p = g.compile_pool(_procs(2), [1.0], [GiB], [])
    assert p["alive_after_compile"] is None and p["compilations"] == 0
    assert g.compile_pool([{"pid": 1, "ppid": 0, "role": "main"}], [], [], []) is None


# -- the CUDA OOM message ------------------------------------------------------------------------------------------
# Wording of PyTorch's caching allocator (current, and before 2.1), hand-written from that format with the numbers
# of the incident in seed 003 where it gives them; not recorded on a GPU here.
CURRENT = (
    "CUDA out of memory. Tried to allocate 226.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which "
    "120.56 MiB is free. Process 5691 has 15.67 GiB memory in use. Of the allocated memory 14.90 GiB is "
    "allocated by PyTorch, and 512.10 MiB is reserved by PyTorch but unallocated."
)
OLDER = (
    "CUDA out of memory. Tried to allocate 36.00 MiB (GPU 1; 7.93 GiB total capacity; 7.38 GiB already "
    "allocated; 12.06 MiB free; 7.40 GiB reserved in total by PyTorch)"
)


def test_parse_both_wordings():
    n = g.parse_cuda_oom(CURRENT)
    assert n["alloc"] == 226 * MiB and n["device"] == 0
    assert n["reserved"] == n["allocated"] + n["reserved_unallocated"]
    assert n["processes"] == [(5691, int(15.67 * GiB))]
    o = g.parse_cuda_oom(OLDER)
    assert o["device"] == 1 and o["alloc"] == 36 * MiB and o["reserved"] == int(7.40 * GiB)
    assert "processes" not in o and g.parse_cuda_oom("CUDA error: an illegal memory access") == {}


def test_oom_message_names_allocation_and_reserved():
    m = g.cuda_oom_message(CURRENT, "train.py, line 40 in forward")
    assert m.startswith(
        "CUDA ran out of memory at train.py, line 40 in forward: an allocation of 226.00 MiB failed on GPU 0"
    )
    assert "reserved 15.40 GiB" in m and "14.90 GiB allocated" in m and "pid 5691" in m
    m = g.cuda_oom_message(OLDER)
    assert "36.00 MiB failed on GPU 1" in m and "reserved 7.40 GiB" in m
    assert "fragmentation" not in m  # ~20 MiB cached but unallocated could not have held the 36 MiB
    observed = {
        "alloc_bytes": 2 * GiB,
        "device": 3,
        "device_total": 80 * GiB,
        "device_free": 1 * GiB,
        "allocated": 70 * GiB,
        "reserved": 78 * GiB,
        "snapshot": "/r/x.pickle",
    }
    m = g.cuda_oom_message("CUDA out of memory.", None, observed)
    assert "2.00 GiB failed on GPU 3" in m and "reserved 78.00 GiB" in m and "/r/x.pickle" in m
    assert "fragmentation" in m  # 8 GiB cached but unallocated would have held the 2 GiB
    assert g.cuda_oom_message("CUDA out of memory.") == "CUDA ran out of memory: CUDA out of memory."


# -- the exit cause, from a real torch.OutOfMemoryError in a real subprocess ---------------------------------------
@pytest.mark.skipif(not has_torch(), reason="needs torch")
def test_cuda_oom_exit_from_a_real_out_of_memory_error(start):
    s = start([script("cuda_oom_cpu.py")]).wait(120)
    ex = s["exit"]
    assert ex["cause"] == "cuda_oom" and ex["code"] == 1
    assert ex["message"].startswith(
        "CUDA ran out of memory at cuda_oom_cpu.py, line 22 in step: an allocation of "
        "226.00 MiB failed on GPU 0 (120.56 MiB free of 15.77 GiB)"
    )
    assert "PyTorch had reserved 15.40 GiB" in ex["message"]
    assert "torch.OutOfMemoryError" in ex["traceback"]
    assert s["allocator"] is None  # CPU torch: CUDA was never initialised, so nothing was sampled


@pytest.mark.skipif(not has_torch(), reason="needs torch")
def test_oom_observer_message_reaches_the_summary(start):
    s = start([script("cuda_oom_cpu.py"), "--observer"]).wait(120)
    (o,) = s["allocator"]["ooms"]
    assert o["alloc_bytes"] == 226 * MiB and o["device_total_bytes"] == 16 * GiB and o["device"] == 0
    assert o["pid"] == s["exit"]["pid"]
    # The observer's numbers win over the parsed text where it gave them.
    assert "(120.00 MiB free of 16.00 GiB)" in s["exit"]["message"]


# -- the dashboard's GPU chart (NVML rounds and torch_alloc in the shapes the collector and the agent send) --------
def _gpu_series():
    from memscope.ui.gpu_chart import GpuSeries

    s = GpuSeries()
    s.add_event(
        "gpu",
        1.0,
        None,
        _round(1, [{"pid": 10, "device": 0, "used": 2 * GiB}, {"pid": 11, "device": 0, "used": 1 * GiB}], used=4 * GiB)[
            "data"
        ],
    )
    s.add_event("torch_alloc", 1.5, 10, {"backend": "cuda", "device": 0, "allocated": 1 * GiB, "reserved": 2 * GiB})
    s.add_event("torch_alloc", 1.6, 11, {"backend": "cuda", "device": 0, "allocated": 0, "reserved": 1 * GiB})
    s.add_event("phase", 1.7, 10, {"name": "train"})  # not GPU data: ignored
    return s


def test_gpu_series_stacks_roles_and_draws_allocator_lines():
    s = _gpu_series()
    assert s.has_data and s.version == 3
    snap = s.snapshot({10: "main", 11: "dataloader_worker"})
    assert snap["tree_pss_by_role"]["main"]["y"] == [2 * GiB]
    assert snap["tree_pss_by_role"]["dataloader_worker"]["y"] == [1 * GiB]
    assert snap["main_rss"]["y"] == [1 * GiB, 1 * GiB]  # allocated, summed over the tree
    assert snap["tree_rss"]["y"] == [2 * GiB, 3 * GiB]  # reserved, summed over the tree
    assert snap["limit"]["y"] == [80 * GiB] and snap["host_available"]["y"] == [76 * GiB]
    assert snap["labels"]["main_rss"] == "PyTorch allocated" and snap["labels"]["limit"] == "device total"


def test_gpu_series_without_nvml_pids_stacks_what_pytorch_reserved():
    from memscope.ui.gpu_chart import GpuSeries

    s = GpuSeries()
    s.add_event("torch_alloc", 1.0, 10, {"backend": "cuda", "device": 0, "allocated": 1, "reserved": 5 * GiB})
    snap = s.snapshot({10: "main"})
    assert snap["tree_pss_by_role"]["main"]["y"] == [5 * GiB] and "limit" not in snap
    assert not GpuSeries().has_data
    idle = GpuSeries()  # a GPU machine, a run that never touches the GPU: no chart
    idle.add_event("gpu", 1.0, None, _round(1, [], other=3)["data"])
    assert not idle.has_data


def test_chart_payload_keeps_line_labels():
    pytest.importorskip("anywidget")
    from memscope.ui.chart import chart_payload

    out = chart_payload({"labels": {"main_rss": "PyTorch allocated"}, "main_rss": {"t": [0], "y": [1]}})
    assert out["labels"] == {"main_rss": "PyTorch allocated"}


def test_dashboard_shows_the_gpu_chart_only_with_gpu_data():
    pytest.importorskip("anywidget")
    pytest.importorskip("ipywidgets")
    from memscope.ui.dashboard import Dashboard

    summary = {"exit": {"cause": "ok", "message": "done", "code": 0}, "duration_s": 2.0, "phases": []}
    plain = Dashboard(summary=summary, procs={10: {"role": "main", "alive": False}})
    assert plain.gpu_chart is None and len(plain.widget.children) == len(Dashboard(summary=summary).widget.children)
    with_gpu = Dashboard(summary=summary, procs={10: {"role": "main", "alive": False}}, gpu=_gpu_series())
    kids = list(with_gpu.widget.children)
    assert with_gpu.gpu_chart is not None and kids.index(with_gpu.gpu_chart) == kids.index(with_gpu.chart) + 1
    assert with_gpu.gpu_chart.data["labels"]["tree_rss"] == "PyTorch reserved"
    assert with_gpu.gpu_chart.data["tree_pss_by_role"]["main"]["y"] == [2 * GiB]
    assert with_gpu.gpu_chart.data["tree_pss_by_role"]["other"]["y"] == [1 * GiB]  # pid 11 is unknown here
    plain.close()
    with_gpu.close()


# -- the GPU chart in a real browser (JupyterLab + chromium): drawn, and its lines carry the GPU labels -----------
GPU_CELLS = [
    "from memscope.ui.dashboard import Dashboard\nfrom memscope.ui.gpu_chart import GpuSeries\nGiB = 1 << 30\n"
    "g = GpuSeries()\n"
    "for i in range(20):\n"
    "    g.add_event('gpu', i, None, {'devices': [{'index': 0, 'name': 'GPU', 'total': 80 * GiB, 'used': 10 * GiB}],\n"
    "                                'procs': [{'pid': 10, 'device': 0, 'used': (2 + i / 10) * GiB}]})\n"
    "    g.add_event('torch_alloc', i + 0.5, 10, {'backend': 'cuda', 'device': 0, 'allocated': GiB, "
    "'reserved': 2 * GiB})\n"
    "d = Dashboard(summary={'exit': {'cause': 'ok', 'message': 'done', 'code': 0}, 'duration_s': 20.0, "
    "'phases': []}, procs={10: {'role': 'main', 'alive': False}}, gpu=g)\nd.widget",
    "import time\nfrom memscope.ui.chart import count_points\ntime.sleep(2)\n"
    "print('POINTS', d.gpu_chart.rendered_points, count_points(d.gpu_chart.data))",
]


def test_gpu_chart_draws_in_a_real_browser(tmp_path):
    tb = pytest.importorskip("test_browser")  # its module-level skips apply: JupyterLab, Playwright, chromium
    proc, url = tb._serve(tmp_path, "lab", GPU_CELLS, tb.PORT + 3)
    try:
        with tb.playwright.sync_playwright() as p:
            browser = tb._launch(p)
            page = tb.open_notebook(browser, url, 1280, 1100)
            tb.run_cell(page, 0)
            page.wait_for_function("() => document.querySelectorAll('.memscope-chart').length >= 2", timeout=90_000)
            tb.run_cell(page, 1)
            m = tb.wait_output(page, 1, r"POINTS (\d+) (\d+)")
            assert int(m.group(1)) == int(m.group(2)) > 0
            labels = page.evaluate(
                "() => JSON.stringify(Bokeh.documents.flatMap((d) => d.roots()).flatMap((r) => r.right || [])"
                ".flatMap((l) => (l.items || []).map((i) => i.label)))"
            )
            for text in ("PyTorch allocated", "PyTorch reserved", "device total"):
                assert text in labels, labels
            browser.close()
    finally:
        tb._shutdown(proc)
