"""Stacks of every process ("last words"): on request, near the limit before a real OOM kill, on a stall, and
never a signal to a process without the handler. Real processes, a real memory cgroup."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import script, wait_for_output

from memscope.collect import procfs
from memscope.errors import StacksError

CG_ROOT = "/sys/fs/cgroup/memory"


def _wait(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("condition never met")


def _main(capture):
    return next(p for p in capture["processes"] if p["role"] == "main")


def test_stacks_while_the_main_holds_the_gil_in_a_long_c_call(start):
    run = start([script("gil_c_call.py")])
    wait_for_output(run, "calling")
    time.sleep(0.5)  # inside the 30 s C call now
    s = run.stacks()
    main = _main(s.data)
    assert main["status"] == "ok", main  # an answer, not a timeout: faulthandler's handler needs no GIL
    frames = main["threads"][0]["frames"]
    assert (frames[0]["func"], frames[0]["line"]) == ("long_c_call", 17), frames
    assert frames[0]["code"].startswith("ctypes.PyDLL(None).sleep(30)")
    assert (
        "gil_c_call.py:17 `ctypes.PyDLL(None).sleep(30)" in s.headline and "(long_c_call ← train_epoch)" in s.headline
    )
    assert any(t["frames"][0]["func"] == "helper" for t in main["threads"][1:])  # every thread
    assert "&lt;module&gt;" in s._repr_html_() and "<module>" not in s._repr_html_()  # escaped
    run.kill()
    summary = run.wait(30)
    assert "request" in [c["reason"] for c in summary["stacks"]], (
        summary.get("unavailable"),
        summary.get("record_errors"),
        summary["exit"],
    )  # recorded with the run


def test_a_process_without_the_handler_is_never_signalled(start):
    run = start([script("exec_child.py")])
    wait_for_output(run, "ready")
    line = next(x for x in run.output_tail if x.startswith("ready"))
    child, plain = (int(x) for x in line.split()[1:3])
    # The fork said hello with the stacks signal, then exec'd /bin/sleep: same pid and start time, no handler.
    _wait(lambda: child in run.stack_taker.handlers and procfs.read_stat(child).comm == "sleep")
    _wait(lambda: plain in run.tree.members())
    s = run.stacks()
    by_pid = {p["pid"]: p for p in s.processes}
    assert by_pid[child]["status"] == "no_handler", by_pid[child]
    assert by_pid[plain]["status"] == "no_agent", by_pid[plain]
    assert by_pid[run.pid]["status"] == "ok"
    time.sleep(0.3)
    # Neither was signalled (no handler: exec'd away, or no agent); both still run.
    assert procfs.read_stat(child).state not in ("Z", "X") and procfs.read_stat(plain).state not in ("Z", "X")
    assert "no stacks handler" in s.text and "no memscope agent" in s.text
    run.kill()
    run.wait(30)
    with pytest.raises(StacksError, match="has ended"):
        run.stacks()


def test_a_hang_after_a_worker_was_killed_gets_its_stall_capture(start):
    run = start([script("dead_worker_hang.py")], stall_after_s=1.5)
    wait_for_output(run, "worker died")
    _wait(lambda: run.stack_taker.note, timeout=60)
    assert run.stack_taker.note == "no progress for 1.5 s: stacks taken"
    run.kill()
    s = run.wait(30)
    stall = [c for c in s["stacks"] if c["reason"] == "stall"]
    assert len(stall) == 1, s["stacks"]
    main = _main(stall[0])
    assert any(f["func"] == "next_batch" and f["line"] == 12 for f in main["threads"][0]["frames"]), main
    assert "dead_worker_hang.py:12 `return q.get()" in stall[0]["headline"]


def _memory_cgroup(limit):
    path = os.path.join(CG_ROOT, f"memscope-stacks-{os.getpid()}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
    except OSError as exc:
        return None, f"cannot create a cgroup v1 memory group under {CG_ROOT}: {exc.strerror}"
    return path, ""


def test_a_real_oom_kill_comes_with_the_stack_taken_before_it(start):
    cg, why = _memory_cgroup(256 << 20)
    if cg is None:
        pytest.skip(why)
    try:
        # 0.75 here (default 0.9): the training grows 80 MB/s and rounds come every 0.05 s on a busy machine.
        run = start([script("oom_grows.py"), cg], stacks_at=0.75)
        s = run.wait(120)
        assert s["exit"]["cause"] == "oom_kill", s["exit"]
        near = [c for c in s["stacks"] if c["reason"] == "near_limit"]
        assert len(near) == 1, s["stacks"]
        main = _main(near[0])
        top = main["threads"][0]["frames"][0]
        assert (top["func"], top["line"]) == ("mine_negatives", 12), main
        assert near[0]["fraction"] >= 0.75 and near[0]["limit_bytes"] == 256 << 20
        end = next(p for p in run.summary()["processes"] if p["pid"] == run.pid)
        assert end["exit_signal"] == "SIGKILL"
        lw = s["last_words"]
        assert lw["capture"] == near[0]["id"], lw
        assert " s before the kill, at " in lw["text"] and "of the 256 MiB limit" in lw["text"], lw
        assert "oom_grows.py:12 `bank.append(bytearray(4 << 20)); time.sleep(0.05)" in lw["text"], lw
        assert "(mine_negatives ← train_epoch)" in lw["text"], lw
    finally:
        _wait(lambda: not open(os.path.join(cg, "cgroup.procs")).read().strip(), timeout=30)
        os.rmdir(cg)


def test_memscope_stacks_from_another_terminal(start, record_dir):
    # The CLI (another process) asks; the supervisor (this one) signals, with its proofs, and records.
    run = start([script("gil_c_call.py")])
    wait_for_output(run, "calling")
    cli = [sys.executable, "-m", "memscope.cli", "stacks", run.run_id, "--record", record_dir]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Stacks on request at ") and "gil_c_call.py:17 `ctypes.PyDLL" in out.stdout
    bad = subprocess.run([*cli[:4], "no-such-run", *cli[5:]], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    run.kill()
    run.wait(30)
    ended = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert ended.returncode == 2 and "has ended" in ended.stderr, ended.stderr


DUMP = """Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/selectors.py", line 415 in select
  File "/usr/lib/python3.11/multiprocessing/connection.py", line 930 in wait
  File "/usr/lib/python3.11/multiprocessing/queues.py", line 113 in get
  File "/site-packages/torch/utils/data/_utils/worker.py", line 309 in _worker_loop
  File "/usr/lib/python3.11/multiprocessing/process.py", line 108 in run
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314 in _bootstrap
  File "/usr/lib/python3.11/multiprocessing/popen_fork.py", line 71 in _launch
  File "/home/u/train.py", line 17 in train_epoch
  File "/home/u/train.py", line 30 in <module>
"""


def test_grouping_and_words_from_dumps():
    from memscope.analysis.stacks import Stacks, last_words, parse_dump

    worker = parse_dump(DUMP)
    assert [f["func"] for f in worker[0]["frames"]][:3] == ["select", "wait", "get"]
    main = parse_dump(
        "Current thread 0x00007f0000000001 (most recent call first):\n"
        '  File "/home/u/train.py", line 142 in mine_negatives\n'
        '  File "/home/u/train.py", line 17 in train_epoch\n'
        '  File "/home/u/train.py", line 30 in <module>\n'
    )
    main[0]["frames"][0]["code"] = "bank = np.concatenate(chunks)  # <b>why</b>"
    cap = {
        "reason": "near_limit",
        "t_s": 40.0,
        "limit_bytes": 2 << 30,
        "fraction": 0.96,
        "processes": [
            {"pid": 10, "role": "main", "state": "R", "status": "ok", "threads": main},
            {"pid": 11, "role": "dataloader_worker", "state": "S", "status": "ok", "threads": worker},
            {"pid": 12, "role": "dataloader_worker", "state": "S", "status": "ok", "threads": parse_dump(DUMP)},
            {"pid": 13, "role": "helper", "state": "S", "status": "no_agent", "threads": []},
        ],
    }
    s = Stacks(cap)
    assert s.headline == (
        "at 96 % of the 2.00 GiB limit, the main process was in train.py:142 `bank = np.concatenate(chunks)` "
        "(mine_negatives ← train_epoch); 2 DataLoader workers waiting in get ← _worker_loop (queues.py); "
        "helper 13: no memscope agent (not Python, or started with python -I/-S) (sleeping)"
    ), s.headline
    assert "&lt;b&gt;why&lt;/b&gt;" in s._repr_html_() and "<b>why</b>" not in s._repr_html_()
    from memscope.analysis.stacks import compact

    c = dict(compact(cap), id="x")
    lw = last_words([c], {"cause": "oom_kill"}, 43.1, True, True)
    assert lw["text"].startswith("3.1 s before the kill, at 96 % of the 2.00 GiB limit, the main process was in ")
    assert last_words([c], {"cause": "ok"}, 43.1, True, True) is None
    assert "no agent" in last_words([], {"cause": "killed"}, 5.0, False, False)["text"]
    far = last_words([], {"cause": "killed"}, 5.0, True, True, 0.3, 0.9)["text"]
    assert "at 30 % of its limit" in far and "90 % high-water mark" in far
    fast = last_words([], {"cause": "oom_kill"}, 5.0, True, True, 0.97, 0.9)["text"]
    assert "too fast to catch" in fast
    old = last_words([], {"cause": "oom_kill"}, 5.0, True, True, 0.97, None)["text"]
    assert "did not take them" in old  # a record from before stacks


def test_a_process_that_exits_mid_capture_is_named_not_waited_for(start):
    run = start([script("fork_sleeps.py")])
    wait_for_output(run, "ready")
    child = int(next(x for x in run.output_tail if x.startswith("ready")).split()[1])
    _wait(lambda: child in run.stack_taker.handlers and child in run.tree.members())
    os.kill(child, signal.SIGSTOP)  # it cannot answer: neither its agent's thread nor the signal's handler runs
    _wait(lambda: procfs.read_stat(child).state == "T")  # stopped whole before the capture asks it
    killer = threading.Timer(0.3, os.kill, (child, signal.SIGKILL))  # and it dies while memscope waits
    killer.start()
    s = run.stacks(timeout=20.0)
    killer.join()
    by_pid = {p["pid"]: p for p in s.processes}
    assert by_pid[child]["status"] == "exited", by_pid[child]
    assert by_pid[run.pid]["status"] == "ok"
    assert s.data["duration_s"] < 20.0  # named as soon as it was gone, not waited for until the deadline
