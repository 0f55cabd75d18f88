"""The tensor census (seed 003: attention maps stored with their autograd graph; seed 001: a list that grows).

Real runs: the census is asked of the main process's agent while it trains, twice; the second one names what
accumulated. The diff and the advice are pure functions, tested on census dicts too.
"""

import time

import pytest
from conftest import has_torch, script, wait_for_output

from memscope.analysis.advice import advise
from memscope.analysis.census import advice, diff
from memscope.errors import CensusError


def _row(shape, count, grad_fn=0, dtype="float32", device="cpu"):
    n = 1
    for s in shape:
        n *= s
    return {
        "device": device,
        "dtype": dtype,
        "shape": list(shape),
        "count": count,
        "bytes": 4 * n * count,
        "grad_fn": grad_fn,
        "requires_grad": grad_fn,
    }


def _census(rows, containers=(), t_s=1.0):
    return {
        "t_s": t_s,
        "objects": 1000,
        "tensors": rows,
        "types": [],
        "containers": list(containers),
        "tensor_bytes": sum(r["bytes"] for r in rows),
    }


@pytest.mark.skipif(not has_torch(), reason="needs torch")
@pytest.mark.parametrize("detach", [False, True])
def test_second_census_names_the_stored_attention_maps(start, detach):
    argv = [script("attention_leak.py"), "60"] + (["--detach"] if detach else [])
    run = start(argv)
    wait_for_output(run, "step 50", timeout=60)
    first = run.census()
    assert first.diff["since"] is None and first.advice is None
    assert first.tensor_count > 0 and first.pid == run.pid
    wait_for_output(run, "step 200", timeout=60)  # at least ~100 more stored maps
    second = run.census()
    grown = {tuple(r["shape"]): r for r in second.diff["tensors"]}
    maps = grown[(8, 4, 48, 48)]  # what the script appends every step
    assert maps["count"] >= 20 and maps["bytes"] == maps["count"] * 8 * 4 * 48 * 48 * 4
    if detach:
        assert maps["grad_fn"] == 0
        assert "keeps tensors across steps" in second.advice and "grad_fn" not in second.advice
    else:
        assert maps["grad_fn"] == maps["count"]
        assert "grad_fn" in second.advice and ".detach()" in second.advice
    assert "<table" in second._repr_html_() and "(8,4,48,48)" in str(second)
    run.stop()
    summary = run.wait(30)
    assert [c["t_s"] for c in summary["census"]] == [first.t_s, second.t_s]
    assert any(a["topic"] == "census" and a["text"] == second.advice for a in summary["advice"])
    # The training was not harmed: it was only stopped by us.
    assert summary["exit"]["cause"] == "stopped_by_user"


def test_census_finds_the_list_that_grows_without_torch(start):
    run = start([script("list_leak.py")])
    time.sleep(1.5)
    run.census()
    time.sleep(1.5)
    second = run.census()
    assert second.tensor_count == 0
    lists = [c for c in second.diff["containers"] if c["type"] == "list of float"]
    assert lists and lists[0]["delta"] > 10000, second.diff["containers"]
    assert "list of float grew from" in second.advice
    run.kill()


def test_census_without_an_agent_says_why_in_one_line(start):
    run = start([script("sleeper.py")], agent=False)
    with pytest.raises(CensusError, match="no agent"):
        run.census()
    run.kill()
    bash = start(["bash", "-c", "sleep 30; true"])
    time.sleep(0.5)
    with pytest.raises(CensusError, match="no memscope agent"):
        bash.census(timeout=3)
    bash.kill()
    with pytest.raises(CensusError, match="ended"):
        bash.census()


def test_diff_and_advice_on_census_dicts():
    a = _census([_row((32, 12, 197, 197), 10, grad_fn=10), _row((10,), 5)], t_s=10.0)
    b = _census([_row((32, 12, 197, 197), 3210, grad_fn=3210), _row((3,), 1)], t_s=70.0)
    d = diff(a, b)
    assert d["since"] == 10.0
    assert d["tensors"][0]["shape"] == [32, 12, 197, 197] and d["tensors"][0]["count"] == 3200
    assert {tuple(r["shape"]): r["count"] for r in d["tensors"]}[(10,)] == -5  # gone
    line = advice(d)
    assert line.startswith("+3,200 float32 (32,12,197,197) tensors") and "grad_fn" in line
    # No growth: says so instead of inventing a culprit.
    assert "nothing grew" in advice(diff(a, a))
    assert advice(diff(None, a)) is None


def test_advice_lines_follow_the_evidence():
    base = {
        "exit": {"cause": "ok"},
        "leak": {"verdict": "no_leak", "by_role": {}},
        "spikes": [],
        "processes": [{"role": "main", "peak_pss_bytes": 100 << 20, "peak_rss_bytes": 100 << 20}],
    }
    assert advise(base) == []
    crash = dict(base, exit={"cause": "worker_crash"})
    assert "num_workers=0" in advise(crash)[0]["text"]
    leak = dict(
        base,
        leak={
            "verdict": "leak",
            "slope_bytes_per_s": 1 << 19,
            "time_to_limit_s": 1200,
            "pace": "slow",
            "by_role": {"dataloader_worker": {"verdict": "leak"}, "main": {"verdict": "no_leak"}},
        },
    )
    text = advise(leak)[0]["text"]
    assert (
        "30 MiB/min (a slow leak) in the DataLoader workers" in text and "reaching the limit in 0:20:00" in text
    )  # one time format on the card (issue 34)
    assert "copy-on-write" in text
    # A week's slow leak (17 MiB an hour) is said per hour: per minute it read "rises 0 MiB/min".
    week = dict(base, leak=dict(leak["leak"], slope_bytes_per_s=17 * 2**20 / 3600))
    assert "rises 17 MiB/h (a slow leak)" in advise(week)[0]["text"]
    # 12 MiB/s is no slow leak.
    fast = dict(base, leak=dict(leak["leak"], slope_bytes_per_s=12 << 20, pace="fast"))
    assert "grows steadily, 12 MiB/s" in advise(fast)[0]["text"] and "slow" not in advise(fast)[0]["text"]
    # The main's own private memory grows while PSS shows the growth in the workers it forked: the main's leak.
    cow = dict(base, leak=dict(leak["leak"], main_private={"verdict": "leak"}))
    assert "in the main process (its own private memory grows" in advise(cow)[0]["text"]
    # Workers: judged from what was alive together, not from the sum of every worker's own peak.
    workers = dict(
        base,
        peak={"tree_pss_bytes": 1000 << 20},
        workers={
            "ever": 242,
            "max_alive": 2,
            "at_peak_alive": 2,
            "peak_pss_bytes": 700 << 20,
            "rss_at_peak_bytes": 1500 << 20,
            "peak_at_s": 30.0,
            "persistent": False,
        },
    )
    line = next(a["text"] for a in advise(workers) if a["topic"] == "workers")
    assert line.startswith("2 DataLoader workers alive together held 700 MiB of PSS at 30 s (350 MiB each)")
    assert "persistent_workers" not in line  # the run does not use persistent workers: never recommend it
    persistent = dict(workers, workers=dict(workers["workers"], persistent=True))
    # "they hold their memory through validation" only where the run validates (issue 30: not in a script without)
    assert "persistent_workers" not in next(a["text"] for a in advise(persistent) if a["topic"] == "workers")
    validating = dict(persistent, phases=[{"name": "validation", "start_s": 10.0, "end_s": 12.0}])
    assert "persistent_workers=False" in next(a["text"] for a in advise(validating) if a["topic"] == "workers")
    small = dict(workers, workers=dict(workers["workers"], peak_pss_bytes=100 << 20))
    assert not any(a["topic"] == "workers" for a in advise(small))
    # Spikes outside any phase are not "validation"; in an eval phase they are.
    spikes = dict(base, spikes=[{"start_s": 1, "end_s": 2, "height_bytes": 250 << 20, "phase": None}])
    assert "validation" not in advise(spikes)[0]["text"] and "memscope.phase" in advise(spikes)[0]["text"]
    val = dict(base, spikes=[dict(spikes["spikes"][0], phase="eval")])
    assert "during 'eval'" in advise(val)[0]["text"] and "validation batch" in advise(val)[0]["text"]
    probe = dict(base, loads=[{"advice": "x.npz: mmap_mode is ignored"}, {"advice": None}])
    assert [a["text"] for a in advise(probe)] == ["x.npz: mmap_mode is ignored"]
