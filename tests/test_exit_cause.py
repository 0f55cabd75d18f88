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
    # No counter readable at all (macOS): being at the limit is the only evidence there is.
    ex = decide(ExitEvidence(**base, last_tree_bytes=int(7.8 * 2**30)))
    assert ex["cause"] == "oom_kill" and "limit at the last sample" in ex["message"]
    ex = decide(ExitEvidence(**base, last_tree_bytes=5 << 30, cgroup_oom_delta=1))
    assert ex["cause"] == "oom_kill" and "container's oom_kill counter rose by 1" in ex["message"]
    # Issue 22 point 7: the counter counts every process of the cgroup (a sidecar): with the run far from the
    # limit, it is no proof; the kernel's log naming one of the run's processes is.
    ex = decide(ExitEvidence(**base, last_tree_bytes=1 << 30, cgroup_oom_delta=1))
    assert ex["cause"] == "killed" and "counter rose by 1, but the run held too little" in ex["message"], ex
    far = dict(base, last_tree_bytes=1 << 30, cgroup_oom_delta=1, names={10: "python"})
    ex = decide(ExitEvidence(**far, oom_victims={99: "sidecar"}))
    assert ex["cause"] == "killed" and "took sidecar (pid 99), no process of the run" in ex["message"], ex
    ex = decide(ExitEvidence(**far, oom_victims={10: "python"}))
    assert ex["cause"] == "oom_kill" and "killed python (pid 10), a process of the run" in ex["message"], ex
    ex = decide(ExitEvidence(**dict(far, cgroup_oom_delta=None), oom_victims={10: "bash"}))  # pid reused
    assert ex["cause"] == "killed", ex


def test_worker_killed_by_oom_killer_is_a_worker_crash_pointing_at_oom():
    exc = {
        "type": "RuntimeError",
        "message": "DataLoader worker (pid 77) is killed by signal: Killed. ",
        "traceback": "...",
    }
    ex = decide(
        ExitEvidence(
            root_pid=10,
            returncode=1,
            main_pid=10,
            exceptions={10: exc},
            roles={10: "main", 77: "dataloader_worker"},
            cgroup_oom_delta=1,
            oom_victims={77: "pt_data_worker"},
            names={10: "python", 77: "pt_data_worker"},
        )
    )
    assert ex["cause"] == "worker_crash" and ex["pid"] == 77 and ex["signal"] == "SIGKILL"
    assert "OOM" in ex["message"] and "container's oom_kill counter rose by 1" in ex["message"]


def test_cuda_oom_exception():
    exc = {
        "type": "OutOfMemoryError",
        "message": "CUDA out of memory. Tried to allocate 226.00 MiB",
        "traceback": 'File "model.py", line 3, in forward',
    }
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
    # A SIGUSR1 passed on earlier (a checkpoint asked for) is no step of the stop.
    usr1 = {"signal": "SIGUSR1", "to": "process", "pids": [1]}
    assert "(SIGINT, as Ctrl-C; it ended there)" in msg("stop", usr1, grp)


def test_host_counter_alone_is_not_an_oom_kill_on_a_shared_host():
    # Seed of issue 13 point 3: a person's kill -9 of a 26 MiB run while another process on the host was
    # OOM-killed. The run's own cgroup counter was read and did not move.
    base = dict(
        root_pid=10,
        returncode=-9,
        main_pid=10,
        limit_bytes=8 << 30,
        last_tree_bytes=26 << 20,
        host_total_bytes=16 << 30,
        host_available_bytes=9 << 30,
    )
    ex = decide(ExitEvidence(**base, host_oom_delta=1, cgroup_oom_delta=0))
    assert ex["cause"] == "killed", ex
    assert "cgroup's oom_kill counter did not rise" in ex["message"] and "another process" in ex["message"]
    # No cgroup counter of its own: the host's rose, but the run was far from any limit.
    ex = decide(ExitEvidence(**base, host_oom_delta=2))
    assert ex["cause"] == "killed" and "far from any limit" in ex["message"], ex
    # Its own counter decides even near the limit: it was read and did not move.
    near = dict(base, last_tree_bytes=int(7.9 * 2**30))
    assert decide(ExitEvidence(**near, host_oom_delta=1, cgroup_oom_delta=0))["cause"] == "killed"
    assert decide(ExitEvidence(**near, cgroup_oom_delta=0))["cause"] == "killed"


def test_host_counter_counts_with_the_run_near_a_limit_or_the_host_out_of_memory():
    base = dict(root_pid=10, returncode=-9, main_pid=10, limit_bytes=8 << 30, host_total_bytes=16 << 30)
    ex = decide(ExitEvidence(**base, last_tree_bytes=int(7.9 * 2**30), host_available_bytes=4 << 30, host_oom_delta=1))
    assert ex["cause"] == "oom_kill" and "host's oom_kill counter rose by 1" in ex["message"], ex
    ex = decide(ExitEvidence(**base, last_tree_bytes=3 << 30, host_available_bytes=200 << 20, host_oom_delta=1))
    assert ex["cause"] == "oom_kill" and "available" in ex["message"], ex
    ex = decide(ExitEvidence(**base, last_tree_bytes=3 << 30, host_available_bytes=200 << 20, cgroup_oom_delta=3))
    assert ex["cause"] == "oom_kill" and "container's oom_kill counter rose by 3" in ex["message"]


def test_counter_rise_is_counted_per_cgroup():
    from memscope.analysis.exit_cause import counter_rise

    assert counter_rise([(0.0, 5)]) is None
    assert counter_rise([(0.0, 5), (1.0, None), (2.0, 7)]) == 2
    # Moved at t=1.5 from a cgroup whose counter read 5 to one reading 0, which then rose to 1.
    assert counter_rise([(0.0, 5), (1.0, 5), (2.0, 0), (3.0, 1)], breaks=[1.5]) == 1
    # Moved to a cgroup with a higher count: not a rise.
    assert counter_rise([(0.0, 0), (1.0, 0), (2.0, 9), (3.0, 9)], breaks=[1.5]) == 0


def test_supervision_notes_and_process_ends():
    from memscope.analysis.supervision import notes, process_end

    assert process_end({"exit_signal": "SIGKILL", "exit_code": None, "exit_t": 3.0}) == "SIGKILL"
    assert process_end({"exit_signal": None, "exit_code": 0, "exit_t": 3.0}) == "exit 0"
    assert process_end({"exit_signal": None, "exit_code": None, "exit_t": 3.0}) == "gone, status unseen"
    assert process_end({"exit_signal": None, "exit_code": None, "exit_t": None}) is None
    procs = [
        {"pid": 10, "role": "main", "cmdline": "python train.py", "exit_signal": None},
        {"pid": 11, "role": "other", "cmdline": "python -c pool", "exit_signal": "SIGKILL"},
        {"pid": 12, "role": "other", "cmdline": "sleep 600", "exit_signal": "SIGTERM"},
    ]
    ev = {
        "leftovers": [{"t": 5.0, "pid": None, "data": {"pids": [12]}}],
        "agent_refused": [{"t": 1.0, "pid": 99, "data": {"claimed_pid": 1}}],
        "collector_degraded": [{"t": 2.0, "pid": None, "data": {"what": "descriptors", "error": "Too many"}}] * 2,
    }
    out = notes(procs, ev, main_pid=10, stopped=False)
    assert any("outlived its root" in n and "pid 12 (other: sleep 600)" in n for n in out)
    assert any("pid 99" in n and "never signalled" in n for n in out)
    assert sum("file descriptors" in n for n in out) == 1
    assert any("pid 11" in n and "SIGKILL" in n for n in out)
    assert not any("SIGKILL" in n for n in notes(procs, {}, main_pid=10, stopped=True))
    # One memscope ended itself at the end (a leftover) did not die "while the run went on".
    ev2 = {"leftovers": [{"t": 5.0, "pid": None, "data": {"pids": [11]}}]}
    assert not any("while the run went on" in n for n in notes(procs, ev2, main_pid=10, stopped=False))
