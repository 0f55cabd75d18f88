"""Phases, marks and the leak verdict on real runs (seeds 001 and 004): spikes alone are not a leak."""

import pytest
from conftest import has_torch, script

pytestmark = pytest.mark.skipif(not has_torch(), reason="needs torch")


def test_validation_spikes_are_not_a_leak_but_a_growing_list_is(start):
    # Both runs at once: each needs 20 s of data for a verdict.
    spiky = start([script("phases_leak.py")], pss_interval_s=0.5)
    leaky = start([script("phases_leak.py"), "--leak"], pss_interval_s=0.5)
    s_spiky, s_leaky = spiky.wait(120), leaky.wait(120)
    assert s_spiky["exit"]["cause"] == "ok" and s_leaky["exit"]["cause"] == "ok"

    names = {p["name"] for p in s_spiky["phases"]}
    assert {"train", "eval", "validation"} <= names
    val = [p for p in s_spiky["phases"] if p["name"] == "validation"]
    train = [p for p in s_spiky["phases"] if p["name"] == "train"]
    assert len(val) >= 10 and all(p["end_s"] > p["start_s"] for p in val)
    # Validation holds 40 MiB more than training: its peaks show it.
    assert max(p["peak_bytes"] for p in val) > max(p["peak_bytes"] for p in train) + (20 << 20)
    assert s_spiky["marks"][0]["text"] == "epoch 0 done"

    assert s_spiky["leak"]["verdict"] == "no_leak", (s_spiky["leak"]["reason"], s_spiky["record"])
    assert s_leaky["leak"]["verdict"] == "leak", (s_leaky["leak"]["reason"], s_leaky["record"])
    slope = s_leaky["leak"]["slope_bytes_per_s"]
    assert 0.8e6 < slope < 4e6  # about 3 MiB per ~1.6 s epoch
    assert s_leaky["leak"]["by_role"]["main"]["verdict"] == "leak"
    assert s_leaky["leak"]["time_to_limit_s"] > 0
    assert any(sp["phase"] == "validation" for sp in s_spiky["spikes"])
    # Each verdict carries one line to act on.
    assert s_spiky["leak"]["advice"].startswith("No leak: the floor is flat; ")
    assert "the highest during 'validation'" in s_spiky["leak"]["advice"]
    assert "in the main process" in s_leaky["leak"]["advice"] and "census" in s_leaky["leak"]["advice"]


def test_phase_and_mark_are_no_ops_outside_memscope():
    import memscope

    with memscope.phase("validation"):
        memscope.mark("nothing happens")

    @memscope.phase("eval")
    def f(x):
        return x + 1

    assert f(1) == 2
