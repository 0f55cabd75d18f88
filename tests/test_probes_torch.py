"""The torch probe inside real processes (CPU torch 2.13): it attaches only once torch is imported, queues CUDA
sampling on torch's own lazy-init (so a CPU run samples nothing and starts nothing), never raises into the user's
code, reports torch.compile's windows, and the collector measures inductor's real compile-worker pool.

Not run here (CI has no GPU): CUDA initialisation firing the queued call, the OOM observer called by the allocator,
history recording and the pickled snapshot. Those paths are written against PyTorch's documented API and guarded;
benchmarks/gpu_device.py ran them once on an H200 (BENCHMARKS.md, "memscope on a real GPU")."""

import json
import os
import subprocess

import pytest
from conftest import PY, has_torch, script

pytestmark = pytest.mark.skipif(not has_torch(), reason="needs torch")


def facts(run):
    s = run.wait(120)
    assert s["exit"]["cause"] == "ok", s["exit"]
    line = next(x for x in run.output_tail if x.startswith("FACTS "))
    return json.loads(line[len("FACTS ") :]), s


def test_probe_does_not_import_torch(start):
    f, s = facts(start([script("torch_probe_facts.py")]))
    assert f["probe_loaded"] and not f["torch_before"] and not f["torch_imported_by_probe"]
    assert f["torch_tasks"] == []


def test_probe_attaches_when_torch_is_imported_and_waits_for_cuda(start):
    f, s = facts(start([script("torch_probe_facts.py"), "--import"]))
    assert f["queued_on_cuda_init"] and not f["cuda_initialized"]
    assert f["dynamo_patched"]
    # CPU torch: CUDA never initialises, so no sampling task and no allocator data.
    assert f["torch_tasks"] == []
    assert s["allocator"] is None and s["gpu"] is None


def _in_process(code: str) -> dict:
    """Run the probe's functions in a fresh interpreter (no collector), with a channel that keeps what is sent."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    prelude = (
        "import json, torch\n"
        "from memscope.agent.probes import torch_memory as tm\n"
        "class Ch:\n"
        "    def __init__(self): self.sent = []\n"
        "    def send(self, m): self.sent.append(m); return True\n"
        "ch = Ch(); tm.install(ch)\n"
    )
    out = subprocess.run([PY, "-c", prelude + code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cuda_paths_never_raise_on_a_torch_without_cuda():
    # The CPU build has no _cuda_attach_out_of_memory_observer and no _cuda_record_memory_history: the init hook,
    # the sampler and the observer must all swallow that, and the sampler must send nothing.
    r = _in_process(
        "tm._on_cuda_init(); tm._sample_cuda()\n"
        "tm._on_oom(0, 226 << 20, 16 << 30, 120 << 20)\n"
        "print(json.dumps({'sent': ch.sent, 'history': tm._history[0]}))\n"
    )
    assert r["history"] is False
    (oom,) = r["sent"]  # the observer's own arguments still go out
    assert oom["t"] == "cuda_oom" and oom["alloc_bytes"] == 226 << 20 and oom["device_total"] == 16 << 30
    assert "snapshot" not in oom  # outside a run (no run directory) and no CUDA: no snapshot


def test_cuda_stats_keeps_the_documented_keys():
    from memscope.agent.probes.torch_memory import cuda_stats

    # Keys as torch.cuda.memory_stats documents them (hand-written, not recorded).
    stats = {
        "allocated_bytes.all.current": 5,
        "reserved_bytes.all.current": 8,
        "inactive_split_bytes.all.current": 2,
        "num_alloc_retries": 1,
        "allocated_bytes.small_pool.current": 99,
    }
    assert cuda_stats(stats) == {"allocated": 5, "reserved": 8, "inactive_split": 2, "alloc_retries": 1}


# -- inductor's compile-worker pool, for real -----------------------------------------------------------------------
def test_compile_pool_alive_after_compilation(start):
    run = start([script("compile_pool.py"), "6"], env=dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="2"))
    s = run.wait(300)
    assert s["exit"]["cause"] == "ok", s["exit"]
    p = s["compile_pool"]
    assert p is not None
    assert p["workers"] == 2 and p["processes"] == 3  # the sidecar and TORCHINDUCTOR_COMPILE_THREADS workers
    assert p["compile_threads"] == 2 and p["compilations"] >= 1
    # Each is a Python with torch imported: tens of MiB of PSS at least.
    assert p["peak_pss_bytes"] > 3 * (20 << 20)
    assert p["alive_after_compile"] is True and p["alive_s_after_compile"] >= 5
    assert "TORCHINDUCTOR_COMPILE_THREADS=1" in p["advice"]
    assert {"topic": "compile_pool", "text": p["advice"]} in s["advice"]
    roles = {q["pid"]: q["role"] for q in s["processes"]}
    assert all(roles[pid] == "compile_worker" for pid in p["pids"])


def test_one_compile_thread_starts_no_pool(start):
    run = start([script("compile_pool.py"), "0"], env=dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1"))
    s = run.wait(300)
    assert s["exit"]["cause"] == "ok", s["exit"]
    assert s["compile_pool"] is None
    assert not [q for q in s["processes"] if q["role"] == "compile_worker"]


def test_forked_compile_workers_tell_their_role(start):
    # TORCHINDUCTOR_WORKER_START=fork: the workers are the main's children with the main's command line; only the
    # agent (inductor's worker initializer) can tell what they are.
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="2", TORCHINDUCTOR_WORKER_START="fork")
    s = start([script("compile_pool.py"), "1"], env=env).wait(300)
    assert s["exit"]["cause"] == "ok", s["exit"]
    main = s["exit"]["pid"]
    workers = [q for q in s["processes"] if q["role"] == "compile_worker"]
    assert workers and all(q["ppid"] == main for q in workers)
    assert s["compile_pool"]["workers"] == len(workers) and "sidecar" not in s["compile_pool"]["advice"]


def test_patched_worker_initializer_still_pickles_for_spawn():
    # TORCHINDUCTOR_WORKER_START=spawn pickles partial(_async_compile_initializer, pid) by reference.
    import functools
    import pickle

    import torch._inductor.compile_worker.utils as utils

    from memscope.agent.probes import torch_memory as tm

    original = utils._async_compile_initializer
    try:
        tm._on_compile_worker_utils(utils)
        patched = utils._async_compile_initializer
        assert patched is not original and patched.__wrapped__ is original
        assert pickle.loads(pickle.dumps(functools.partial(patched, 1))).func is patched
    finally:
        utils._async_compile_initializer = original
