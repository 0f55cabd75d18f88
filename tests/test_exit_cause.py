"""The exit-cause decision as a pure function, on evidence shaped like real runs."""
from memscope.analysis.exit_cause import ExitEvidence, decide, fault_signal

FAULT = """Fatal Python error: Segmentation fault

Current thread 0x00007f (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/home/u/train.py", line 88 in collate
  File "/home/u/train.py", line 120 in <module>
"""


def test_segfault_names_the_users_frame():
    ex = decide(ExitEvidence(root_pid=10, returncode=-11, main_pid=10, faults={10: FAULT}))
    assert ex["cause"] == "segfault" and ex["signal"] == "SIGSEGV" and ex["code"] is None
    assert "train.py, line 88 in collate" in ex["message"] and ex["traceback"] == FAULT


def test_oom_kill_needs_evidence_and_says_which():
    base = dict(root_pid=10, returncode=-9, main_pid=10, limit_bytes=8 << 30)
    assert decide(ExitEvidence(**base, last_tree_bytes=2 << 30))["cause"] == "killed"
    ex = decide(ExitEvidence(**base, last_tree_bytes=int(7.8 * 2**30)))
    assert ex["cause"] == "oom_kill" and "limit at the last sample" in ex["message"]
    ex = decide(ExitEvidence(**base, last_tree_bytes=1 << 30, cgroup_oom_delta=1))
    assert ex["cause"] == "oom_kill" and "container's oom_kill counter rose by 1" in ex["message"]


def test_worker_killed_by_oom_killer_is_a_worker_crash_pointing_at_oom():
    exc = {"type": "RuntimeError", "message": "DataLoader worker (pid 77) is killed by signal: Killed. ",
           "traceback": "..."}
    ex = decide(ExitEvidence(root_pid=10, returncode=1, main_pid=10, exceptions={10: exc},
                             roles={10: "main", 77: "dataloader_worker"}, host_oom_delta=1))
    assert ex["cause"] == "worker_crash" and ex["pid"] == 77 and ex["signal"] == "SIGKILL"
    assert "OOM" in ex["message"] and "host's oom_kill counter rose by 1" in ex["message"]


def test_cuda_oom_exception():
    exc = {"type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 226.00 MiB",
           "traceback": 'File "model.py", line 3, in forward'}
    ex = decide(ExitEvidence(root_pid=1, returncode=1, main_pid=1, exceptions={1: exc}))
    assert ex["cause"] == "cuda_oom" and "226.00 MiB" in ex["message"]


def test_stop_wins_and_exceptions_after_success_do_not_count():
    assert decide(ExitEvidence(root_pid=1, returncode=-2, stop_requested="stop"))["cause"] == "stopped_by_user"
    # An exception in a helper process does not make a clean run an "exception".
    ex = decide(ExitEvidence(root_pid=1, returncode=0, main_pid=1, exceptions={5: {"type": "E", "message": "m"}}))
    assert ex["cause"] == "ok"


def test_wrapper_status_128_plus_n_is_read_as_the_mains_signal():
    ex = decide(ExitEvidence(root_pid=1, returncode=137, main_pid=2, roles={1: "wrapper", 2: "main"}))
    assert ex["cause"] == "killed" and ex["signal"] == "SIGKILL" and ex["code"] == 137
    assert fault_signal("Fatal Python error: Bus error\n") == "SIGBUS"
    assert fault_signal("Fatal Python error: Aborted\n") == "SIGABRT"


def test_stop_message_names_the_signals_really_sent():
    def msg(how, *sent):
        return decide(ExitEvidence(root_pid=1, returncode=-15, stop_requested=how, signals_sent=list(sent)))["message"]

    grp = {"signal": "SIGINT", "to": "group", "pids": [1]}
    term = {"signal": "SIGTERM", "to": "tree", "pids": [1, 2]}
    assert "(SIGINT, as Ctrl-C; it ended there)" in msg("stop", grp)
    assert "(SIGINT, then SIGTERM (each after the grace period))" in msg("stop", grp, term)
    left = {"signal": "SIGTERM", "to": "leftovers", "pids": [7, 8]}
    assert "(SIGINT, as Ctrl-C; then SIGTERM to 2 processes left behind)" in msg("stop", grp, left)
    # A record from before signal_sent events: what a stop sends.
    assert "SIGINT, then SIGTERM and SIGKILL to what was left" in msg("stop")
