"""The verdict benchmark's replay (benchmarks/verdict_bench.py): a record read as it stood at a moment, the live
line's statistics, the scenarios' declared truths. No timing is asserted."""

import os
import sys
from pathlib import Path
from typing import Any

import memscope
from memscope.model import GROWTH_KINDS
from memscope.record.reader import RunData, connect

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import verdict_bench as vb  # noqa: E402

# A parent that keeps 1 MiB every 0.1 s for 3 s, beside a child that lives its first second.
GROWS_WITH_A_CHILD = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1)'])\n"
    "kept = []\n"
    "for _ in range(30):\n"
    "    kept.append(bytearray(1 << 20)); time.sleep(0.1)\n"
    "c.wait()\n"
)


def test_a_prefix_reads_the_record_as_it_stood_then(tmp_path: Path) -> None:
    run = memscope.run([sys.executable, "-c", GROWS_WITH_A_CHILD], record_dir=str(tmp_path), output="capture")
    s = run.wait(60)
    assert s is not None
    record = s["record"]
    full = RunData(record)
    try:
        assert full.ended()
        last = full.last_sample_t()
        assert last is not None
        exits = {p["pid"]: p["exit_t"] for p in full.processes()}
    finally:
        full.close()
    assert last > 2.5 and all(t is not None for t in exits.values())

    end = 1.5
    con = connect(record, readonly=True)
    try:
        vb._prefix_views(con, end)
        rd = RunData(record, con=con)
        assert (rd.last_sample_t() or 0.0) <= end
        assert not rd.ended() and not rd.events("exit_status")
        assert rd.run_row()["summary"] is None and rd.run_row()["duration_s"] is None
        procs = {p["pid"]: p for p in rd.processes()}
        assert procs, "the prefix sees the run's processes"
        # A process that ended after the cut is alive in the prefix; none is seen ending after it.
        assert all(p["exit_t"] is None or p["exit_t"] <= end for p in procs.values())
        assert any(p["exit_t"] is None and exits[pid] > end for pid, p in procs.items())
        # The views follow the cut: a later one sees more.
        n_early = con.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        vb._prefix_views(con, last)
        assert con.execute("SELECT COUNT(*) FROM samples").fetchone()[0] > n_early
    finally:
        con.close()

    final = vb.final_of(record)
    assert final["verdict"] in ("leak", "no_leak", "insufficient_data")
    line = vb.live_line(record, 1.0)
    assert line and [x["t"] for x in line] == sorted(x["t"] for x in line) and line[-1]["t"] <= last + 1.0
    assert all(x["verdict"] in ("leak", "no_leak", "insufficient_data") for x in line)


def _line(*states: tuple[str, str | None]) -> list[dict[str, Any]]:
    return [{"t": 5.0 * (i + 1), "verdict": v, "growth": g} for i, (v, g) in enumerate(states)]


def test_live_stats_count_changes_after_the_first_answer() -> None:
    truth = {"verdict": "leak", "growth": "leak"}
    flips = _line(
        ("insufficient_data", None),
        ("no_leak", "step"),
        ("leak", "leak"),
        ("insufficient_data", None),
        ("leak", "leak"),
    )
    st = vb.live_stats(flips, truth, {"verdict": "no_leak", "growth": "step"})
    assert st["changes"] == 3  # no_leak -> leak -> insufficient -> leak; the wait before the first answer is free
    assert st["first_right_s"] == 15.0 and st["first_right_kind_s"] == 15.0
    assert st["contradicts"] and st["kind_differs"]  # the card says no_leak where the line last said leak
    steady = _line(("insufficient_data", None), ("insufficient_data", None), ("leak", "leak"), ("leak", "leak"))
    st = vb.live_stats(steady, truth, {"verdict": "leak", "growth": "leak"})
    assert st["changes"] == 0 and st["first_right_s"] == 15.0 and not st["contradicts"]
    assert st["sequence"] == "insufficient_data@5 leak/leak@15"


def test_every_scenario_declares_a_truth_the_table_can_judge() -> None:
    truths = vb.scenarios()
    assert len(truths) >= 10
    for name, truth in truths.items():
        assert truth["verdict"] in ("leak", "no_leak"), name
        assert truth["growth"] in GROWTH_KINDS and set(truth.get("growth_also", ())) <= set(GROWTH_KINDS), name
        assert (truth["verdict"] == "leak") == (truth["growth"] == "leak"), name
        assert 20 <= truth["seconds"] <= 120, name
        assert vb.command(name, truth)[0]  # a command it can run
    assert vb.right_kind("flat", truths["hf_eval_workers"]) and not vb.right_kind(None, truths["hf_eval_workers"])


def test_the_held_out_scenarios_declare_truths_and_run_from_their_own_folders(monkeypatch: Any) -> None:
    # --scenarios DIR: the scenarios written after the verdict was tuned, two rounds, three each.
    bench = os.path.dirname(os.path.abspath(vb.__file__))
    for folder in ("scenarios_heldout", "scenarios_heldout2"):
        monkeypatch.setattr(vb, "SCENARIOS", os.path.join(bench, folder))
        truths = vb.scenarios()
        assert len(truths) == 3, folder
        for name, truth in truths.items():
            assert (truth["verdict"] == "leak") == (truth["growth"] == "leak"), name
            cmd = vb.command(name, truth)
            assert cmd[-1].startswith(os.path.join(bench, folder)) and os.path.exists(cmd[-1]), cmd
        assert f"| {name} |" in vb.scenario_list()
