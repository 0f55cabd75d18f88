"""Phases, marks and the leak verdict on real runs (seeds 001 and 004): spikes alone are not a leak."""

import os

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
    # Validation holds 40 MiB more than training: its peaks show it. Medians: on a loaded machine a round read
    # across a switch can count a validation's memory in the train phase after it (seen in CI with both cores busy,
    # on this round's code and the last one's alike).
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    val_peak, train_peak = med([p["peak_bytes"] for p in val]), med([p["peak_bytes"] for p in train])
    assert val_peak > train_peak + (20 << 20), (val_peak, train_peak)
    assert s_spiky["marks"][0]["text"] == "epoch 0 done"

    assert s_spiky["leak"]["verdict"] == "no_leak", (s_spiky["leak"]["reason"], s_spiky["record"])
    assert s_leaky["leak"]["verdict"] == "leak", (s_leaky["leak"]["reason"], s_leaky["record"])
    slope = s_leaky["leak"]["slope_bytes_per_s"]
    assert 0.8e6 < slope < 4e6  # about 3 MiB per ~1.6 s epoch
    assert s_leaky["leak"]["by_role"]["main"]["verdict"] == "leak"
    assert s_leaky["leak"]["time_to_limit_s"] > 0
    assert any(sp["phase"] == "validation" for sp in s_spiky["spikes"])
    # Each verdict carries one line to act on.
    assert s_spiky["leak"]["growth"]["kind"] == "spikes", s_spiky["leak"]["growth"]
    assert s_spiky["leak"]["advice"].startswith("Only spikes: the floor is flat; "), s_spiky["leak"]["advice"]
    assert "the highest during 'validation'" in s_spiky["leak"]["advice"]
    assert s_leaky["leak"]["growth"]["kind"] == "leak" and s_leaky["leak"]["growth"]["where"][0] == "main"
    assert "in the main process" in s_leaky["leak"]["advice"] and "census" in s_leaky["leak"]["advice"]
    # The way every view has (a terminal has no button): run.census() on the run's handle.
    assert "run.census()" in s_leaky["leak"]["advice"] and "(the Tensor census button" not in s_leaky["leak"]["advice"]


def test_phase_and_mark_are_no_ops_outside_memscope():
    import memscope

    with memscope.phase("validation"):
        memscope.mark("nothing happens")

    @memscope.phase("eval")
    def f(x):
        return x + 1

    assert f(1) == 2


def _live_lines(record):
    """The live leak line every view shows (Run.verdict, session/verdict.py), replayed every second of a recorded
    run: the same fit on the record's series up to then, through the same hold."""
    from memscope.session.verdict import replay
    from memscope.ui.terminal import verdict_text

    return [(t, v, verdict_text(v)) for t, v in replay(record, 1.0)]


def test_the_final_card_never_says_less_than_the_live_line(start):
    """Issue 23 #4: 01-quickstart (its demo, 15 s of training) said "memory grows steadily: the floor rises
    12 MiB/s" live at 20 s (a fit of its imports) and "not yet known (a verdict needs 20 s of samples; 20 s so
    far)" at its end; in between, the line cycled through the fit's conditions. ~25 s."""
    import re
    import sys

    import memscope

    demo = os.path.join(os.path.dirname(memscope.__file__), "demo", "train_demo.py")
    run = start([sys.executable, demo, "--seconds", "15"], interval_s=0.1, pss_interval_s=1)  # as 01-quickstart
    s = run.wait(120)
    assert s["exit"]["cause"] == "ok", s["exit"]
    lines = _live_lines(s["record"])
    said = [(t, text) for t, v, text in lines if v["verdict"] != "insufficient_data"]
    if said:  # a verdict the user saw live, the card keeps (the final fit has as much data or more)
        assert s["leak"]["verdict"] != "insufficient_data", (said[0], s["leak"])
    # What it waits for, in plain words: 20 s of samples until the training starts, then 20 s of training.
    # (What it leans to while not yet sure is said beside: "leaning to ...", never a wait of the fit's own.)
    waits = {
        re.sub(r"\d+", "N", text)
        for _, v, text in lines
        if v["verdict"] == "insufficient_data" and "leaning to" not in text
    }
    assert len(waits) <= 2, waits
    assert not any("half" in w or "points" in w for w in waits), waits
    assert "leak or spikes: not yet known (a verdict needs N s of training; N s so far)" in waits, waits


def test_the_live_table_shows_the_latest_exits_and_counts_the_rest():
    """Issue 24: the table is resent at every push; with DataLoader workers restarted every epoch it grew to 200
    exited rows (~150 KiB a push, thousands of DOM nodes). Live ones all, the 10 latest exits, a line for the rest."""
    from memscope.ui.dashboard import TABLE_EXITED
    from memscope.ui.fragments import process_table

    procs = {1: {"role": "main", "rss": 900 << 20, "alive": True, "cmdline": "python train.py"}}
    for e in range(25):  # 25 epochs of 8 workers, each set exited at the epoch's end
        for w in range(8):
            procs[100 + 8 * e + w] = {
                "role": "dataloader_worker",
                "rss": (300 + w) << 20,
                "alive": False,
                "exit_t": 60.0 * e,
                "exit_code": 0,
                "cmdline": f"worker {e}.{w}",
            }
    live = {1000 + w: {"role": "dataloader_worker", "rss": 300 << 20, "alive": True} for w in range(8)}
    procs.update(live)
    full = process_table(procs)
    html = process_table(procs, max_exited=TABLE_EXITED)
    assert full.count("<tr") == 1 + 1 + 8 + 200
    assert html.count("<tr") == 1 + 1 + 8 + 10 + 1 and len(html) < len(full) / 5
    assert "and 190 more exited processes" in html and "memscope report" in html
    assert "worker 24.7" in html and "worker 23.0" not in html  # the latest epoch's exits are the ones shown
    assert html.index("python train.py") < html.index("worker 24.")  # live rows first
