"""Exit messages say only what memscope saw: no agent, a user's excepthook, a crash without a stack, and the
user's own faulthandler output."""

import json
import os
import subprocess

import pytest
from conftest import PY, script


@pytest.mark.parametrize("how", ["-I", "-S", "PYTHONPATH"])
def test_no_agent_means_memscope_could_not_see_inside(start, how):
    if how == "PYTHONPATH":  # a re-exec that replaced PYTHONPATH (memscope's entry with it)
        argv = ["env", "PYTHONPATH=/nowhere", PY, script("raises.py")]
    else:
        argv = [PY, how, script("raises.py")]
    s = start(argv).wait(60)
    ex = s["exit"]
    assert ex["cause"] == "exit_nonzero" and ex["code"] == 1, ex
    assert "memscope could not see inside this process" in ex["message"]
    assert "without an uncaught Python exception" not in ex["message"]


def test_with_the_agent_an_exit_1_without_exception_says_so(start):
    s = start([script("clean.py"), "0.1", "1"]).wait(60)
    assert "without an uncaught Python exception" in s["exit"]["message"]


@pytest.mark.parametrize("hook", ["rich", "custom"])
def test_a_users_excepthook_does_not_hide_the_exception(start, hook):
    s = start([script("hooked_raise.py"), hook]).wait(60)
    ex = s["exit"]
    assert ex["cause"] == "exception", ex
    assert ex["message"].startswith("ValueError: shard 7 is corrupt") and "load_shard" in ex["message"]
    assert "hooked_raise.py" in ex["traceback"]


def test_a_segfault_without_a_stack_does_not_point_at_one(start):
    s = start([PY, "-I", script("segfault.py")]).wait(60)
    ex = s["exit"]
    assert ex["cause"] == "segfault" and ex["traceback"] is None, ex
    assert "no Python stack was captured" in ex["message"]
    exit_advice = [a["text"] for a in s["advice"] if a["topic"] == "exit"]
    assert exit_advice and "exit.traceback" not in exit_advice[0] and "no Python stack" in exit_advice[0]


def test_pythonfaulthandler_still_puts_the_users_crash_stack_on_stderr(tmp_path):
    out = tmp_path / "s.json"
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    p = subprocess.run(
        [
            PY,
            "-m",
            "memscope.cli",
            "run",
            "--quiet",
            "--record",
            str(tmp_path / "runs"),
            "--summary-json",
            str(out),
            script("segfault.py"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert p.returncode == 139, p.stderr
    assert "Fatal Python error: Segmentation fault" in p.stderr
    assert 'segfault.py", line 6 in collate' in p.stderr
    s = json.loads(out.read_text())
    assert s["exit"]["cause"] == "segfault" and "collate" in s["exit"]["traceback"]


def test_the_first_rank_to_fail_is_blamed_not_the_lowest_pid():
    from memscope.analysis.exit_cause import ExitEvidence, decide

    gloo = {
        "type": "RuntimeError",
        "message": "Connection closed by peer [127.0.0.1]:1234",
        "rank": "0",
        "traceback": 'Traceback (most recent call last):\n  File "/w/train.py", line 20, in <module>\n',
        "wall": 5.0,
    }
    bad = {
        "type": "ValueError",
        "message": "labels out of range",
        "rank": "1",
        "wall": 4.2,
        "traceback": 'Traceback (most recent call last):\n  File "/w/train.py", line 13, in step\n',
    }
    e = ExitEvidence(
        root_pid=10,
        returncode=1,
        main_pid=11,
        roles={10: "wrapper", 11: "rank", 12: "rank"},
        exceptions={11: gloo, 12: bad},
        agent_pids={10, 11, 12},
    )
    ex = decide(e)
    assert ex["cause"] == "exception" and ex["pid"] == 12
    assert ex["message"].startswith(
        "Rank 1 (pid 12) failed first: ValueError: labels out of range at train.py, "
        "line 13 in step; rank 0 failed after it (RuntimeError)"
    )


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(PY), "torchrun")), reason="no torchrun")
def test_torchrun_rank_1_failing_first_is_reported_with_its_rank(start):
    from memscope.record.reader import RunData

    run = start([os.path.join(os.path.dirname(PY), "torchrun"), "--nproc-per-node", "2", script("ddp_rank1_fails.py")])
    s = run.wait(120)
    rd = RunData(s["record"])
    try:
        rank_of = {e["pid"]: e["data"].get("rank") for e in rd.events("agent_hello")}
    finally:
        rd.close()
    rank1 = next(pid for pid, r in rank_of.items() if r == "1")
    ex = s["exit"]
    assert ex["cause"] == "exception" and ex["pid"] == rank1, ex
    assert ex["message"].startswith(f"Rank 1 (pid {rank1}) failed first: ValueError: rank 1: labels out of range")
    assert "ddp_rank1_fails.py" in ex["traceback"]
