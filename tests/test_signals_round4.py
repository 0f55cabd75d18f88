"""Issue 32's "harms the run" cases, each on the real mechanism: the real `timeout`, a scheduler that signals
every process of the step, a fork+exec storm under stacks requests, a worker in ``signal.pause()`` under the stall
watch, an attach cell run twice, a second local user who knows the run id; and issue 30's stall of a wrapped run.

Every signal here goes to a process this test started (by pid), never by name.
"""

import json
import os
import select
import signal
import subprocess
import tempfile
import time

import psutil
import pytest
from conftest import PY, script

from memscope.record.reader import RunData

MEMSCOPE = [PY, "-m", "memscope.cli"]


def events_of(record, kind):
    rd = RunData(record)
    try:
        return rd.events(kind)
    finally:
        rd.close()


def _readline(p, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 0.2)
        if r:
            return p.stdout.readline()
        if p.poll() is not None:
            break
    raise AssertionError(f"no line from {p.args}; stderr: {p.stderr.read() if p.poll() is not None else ''}")


def _end(p, timeout=60):
    """Wait for ``p``; if it hangs, kill it and what it started (by pid) and fail."""
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            kids = psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            kids = []
        for k in kids:
            try:
                k.kill()
            except psutil.Error:
                pass
        p.kill()
        p.wait()
        raise AssertionError(f"{p.args[:4]}… hung: memscope never ended the run") from None


# -- point 1: `timeout` sends two copies of one SIGTERM -----------------------------------------------------------
def _ckpt_run(tmp_path, prefix=(), **kw):
    ck, sj = tmp_path / "ckpt", tmp_path / "summary.json"
    p = subprocess.Popen(
        [*prefix, *MEMSCOPE, "run", "--quiet", "--grace", "5", "--record", str(tmp_path / "runs"),
         "--summary-json", str(sj), "--", PY, script("ckpt_term.py"), str(ck), "1.0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )  # fmt: skip
    line = _readline(p)
    assert line.startswith("ready"), line
    return p, ck, sj, int(line.split()[1])


def _one_sigterm_and_the_checkpoint(p, ck, sj, rc_expected):
    rc = _end(p)
    err = p.stderr.read()
    assert ck.exists() and ck.read_text() == "step 42\n", err  # saved: no SIGKILL, no second SIGTERM
    assert rc == rc_expected, err
    assert err.count("SIGTERM: passing it on") == 1, err
    s = json.loads(sj.read_text())
    sent = [e["data"] for e in events_of(s["record"], "signal_sent")]
    assert [d["signal"] for d in sent] == ["SIGTERM"], sent  # one copy; no SIGKILL, no SIGCONT nobody sent
    assert [e["data"]["how"] for e in events_of(s["record"], "stop_requested")] == ["terminate"]
    # the words say what was sent (point 10): no SIGKILL went out
    assert "(no SIGKILL)" in s["exit"]["message"] and "then SIGKILL" not in s["exit"]["message"], s["exit"]


@pytest.mark.parametrize("attempt", range(3))
def test_the_real_timeout_signalled_costs_no_checkpoint(tmp_path, attempt):
    # `timeout 60 memscope run -- python ckpt.py`; `kill -TERM <timeout>` once training runs: timeout sends SIGTERM
    # to memscope, then to its own group (memscope in it), then SIGCONT to both. The copies land ~0.2 ms apart,
    # while memscope's Python handler for the first may be running: CPython runs it again from inside itself.
    p, ck, sj, _ = _ckpt_run(tmp_path, prefix=["timeout", "60"])
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGTERM)  # p is timeout itself
    _one_sigterm_and_the_checkpoint(p, ck, sj, 0)  # timeout was signalled, not timed out: the status is the run's


@pytest.mark.parametrize("attempt", range(3))
def test_a_copy_landing_while_the_handler_runs_is_the_same_press(tmp_path, attempt):
    # What timeout does, with the second copy sent the moment memscope's handler for the first is seen running (it
    # writes its line first): CPython runs the handler again from inside itself. The old code counted a second
    # press (SIGKILL: the checkpoint lost) or deadlocked on the stop lock the outer call held (memscope hung, the
    # run never got its SIGTERM).
    p, ck, sj, _ = _ckpt_run(tmp_path, process_group=0)
    time.sleep(0.3)
    fd = p.stderr.fileno()
    os.set_blocking(fd, False)
    os.kill(p.pid, signal.SIGTERM)
    got, deadline = b"", time.monotonic() + 30
    while b"passing it on" not in got and time.monotonic() < deadline:
        try:
            got += os.read(fd, 4096)
        except BlockingIOError:
            pass
    os.killpg(p.pid, signal.SIGTERM)  # the group-wide copy, inside the first copy's handling
    os.set_blocking(fd, True)
    rc = _end(p)
    err = got.decode() + p.stderr.read()
    assert ck.exists() and ck.read_text() == "step 42\n", err  # saved: no SIGKILL, no second SIGTERM
    assert rc == 0, err
    s = json.loads(sj.read_text())
    sent = [e["data"]["signal"] for e in events_of(s["record"], "signal_sent")]
    assert sent == ["SIGTERM"], sent


# The second copy delivered at a fixed point inside the first copy's handling: a real SIGTERM to memscope itself,
# sent from within Run.terminate (where the first copy's handler is), so CPython runs the handler nested every time.
NESTED = """
import os, signal, sys
from memscope.cli import main
from memscope.session.run import Run

real = Run.terminate
def terminate(self, *a, **kw):
    os.kill(os.getpid(), signal.SIGTERM)  # the group's copy, landing while the first is handled
    return real(self, *a, **kw)
Run.terminate = terminate
sys.exit(main(sys.argv[1:]))
"""


def test_a_copy_delivered_inside_the_handler_is_the_same_press(tmp_path):
    ck, sj = tmp_path / "ckpt", tmp_path / "summary.json"
    p = subprocess.Popen(
        [PY, "-c", NESTED, "run", "--quiet", "--grace", "5", "--record", str(tmp_path / "runs"), "--summary-json",
         str(sj), "--", PY, script("ckpt_term.py"), str(ck), "1.0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert _readline(p).startswith("ready")
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGTERM)
    _one_sigterm_and_the_checkpoint(p, ck, sj, 0)


# -- point 2: a scheduler that signals every process of the step -------------------------------------------------
def _freezer_cgroup():
    base = "/sys/fs/cgroup/freezer"
    if not os.path.isdir(base):
        return None
    path = os.path.join(base, f"memscope-test-step-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.mkdir(path)
    except OSError:
        return None
    return path


def _slurm_signal(cg, sig):
    """What Slurm's proctrack/cgroup does at a time limit or scancel: freeze the step, signal every process in it,
    thaw (so each gets its copy at the same instant)."""
    with open(os.path.join(cg, "freezer.state"), "w") as f:
        f.write("FROZEN")
    try:
        with open(os.path.join(cg, "cgroup.procs")) as f:
            pids = [int(x) for x in f.read().split()]
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, sig)
    finally:
        with open(os.path.join(cg, "freezer.state"), "w") as f:
            f.write("THAWED")
    return pids


def _under_slurm(tmp_path, cg, inner):
    """memscope as a Slurm step's task: its parent is named slurmstepd (a shell under that name, as comm reads it)
    and stays outside the step's cgroup, where memscope goes, with Slurm's environment. ``inner``: the shell words
    that start memscope."""
    stepd = tmp_path / "slurmstepd"
    stepd.symlink_to("/bin/sh")
    env = dict(os.environ, SLURM_JOB_ID="4242", SLURM_STEP_ID="0")
    return subprocess.Popen(
        [str(stepd), "-c", f'sh -c \'echo $$ > {cg}/cgroup.procs && exec "$@"\' sh {inner} </dev/null; echo "step done $?"'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def _memscope_words(tmp_path, ck, sj):
    import shlex

    words = [*MEMSCOPE, "run", "--quiet", "--grace", "5", "--record", str(tmp_path / "runs"), "--summary-json",
             str(sj), "--", PY, script("ckpt_term.py"), str(ck), "1.0"]  # fmt: skip
    return " ".join(shlex.quote(w) for w in words)


def _rmdir_when_empty(cg):
    for _ in range(100):
        try:
            os.rmdir(cg)
            return
        except OSError:
            time.sleep(0.1)


@pytest.mark.parametrize("attempt", range(3))
def test_a_slurm_stop_gives_the_training_one_sigterm_not_two(tmp_path, attempt):
    # Slurm at a time limit (and scancel) signals memscope AND the training. A training whose handler means "second
    # SIGTERM = force quit" lost its checkpoint 3 of 3 under memscope (which passed its own copy on).
    cg = _freezer_cgroup()
    if cg is None:
        pytest.skip("no writable cgroup v1 freezer here")
    ck, sj = tmp_path / "ckpt", tmp_path / "summary.json"
    p = _under_slurm(tmp_path, cg, _memscope_words(tmp_path, ck, sj))
    try:
        line = _readline(p)
        assert line.startswith("ready"), line
        time.sleep(0.3)
        pids = _slurm_signal(cg, signal.SIGTERM)
        assert int(line.split()[1]) in pids and len(pids) == 2  # memscope and the training (stepd is outside)
        assert _readline(p) == "checkpoint saved\n"
        assert _readline(p) == "step done 0\n"
        err = p.stderr.read()
        assert ck.exists() and ck.read_text() == "step 42\n", err  # one SIGTERM: the checkpoint, not "force quit"
        assert "Slurm signals every process of the step; not passed on" in err, err
        s = json.loads(sj.read_text())
        assert [e["data"]["signal"] for e in events_of(s["record"], "signal_sent")] == [], s["exit"]
        assert [e["data"]["signal"] for e in events_of(s["record"], "signal_not_forwarded")] == ["SIGTERM"]
    finally:
        _end(p)
        _rmdir_when_empty(cg)


# -- user signals: Slurm's --signal=USR1@60 and kill -USR1 ------------------------------------------------------------
def _usr1_run(tmp_path, *args):
    sj = tmp_path / "summary.json"
    p = subprocess.Popen(
        [*MEMSCOPE, "run", "--quiet", "--record", str(tmp_path / "runs"), "--summary-json", str(sj), "--",
         PY, script("usr1_ckpt.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = _readline(p)
    assert line.startswith("ready"), line
    return p, sj


def test_a_user_signal_to_memscope_reaches_the_training_that_catches_it_once(tmp_path):
    # SIGUSR1's default action killed memscope (its record ended there); the training never got what was sent.
    p, sj = _usr1_run(tmp_path)
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGUSR1)
    os.kill(p.pid, signal.SIGUSR1)  # kill -USR1 to memscope and its group: two copies of one event
    assert _readline(p) == "usr1 1\n"
    assert _end(p) == 0, p.stderr.read()
    s = json.loads(sj.read_text())
    assert s["exit"]["cause"] == "ok", s["exit"]
    assert [e["data"]["signal"] for e in events_of(s["record"], "signal_sent")] == ["SIGUSR1"]


def test_a_user_signal_to_memscope_never_ends_a_training_that_does_not_catch_it(tmp_path):
    p, sj = _usr1_run(tmp_path, "plain")
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGUSR2)
    assert _readline(p) == "usr1 0\n"  # trained on to its end: nothing passed on would have killed it
    assert _end(p) == 0
    assert "SIGUSR2: the training does not catch it; not passed on" in p.stderr.read()
    s = json.loads(sj.read_text())
    assert s["exit"]["cause"] == "ok" and events_of(s["record"], "signal_sent") == []


def test_slurms_user_signal_to_the_step_reaches_the_training_once_and_memscope_lives(tmp_path):
    # `sbatch --signal=USR1@60`: Slurm signals every process of the step, memscope and the training alike.
    cg = _freezer_cgroup()
    if cg is None:
        pytest.skip("no writable cgroup v1 freezer here")
    import shlex

    sj = tmp_path / "summary.json"
    words = [*MEMSCOPE, "run", "--quiet", "--record", str(tmp_path / "runs"), "--summary-json", str(sj), "--",
             PY, script("usr1_ckpt.py")]  # fmt: skip
    p = _under_slurm(tmp_path, cg, " ".join(shlex.quote(w) for w in words))
    try:
        assert _readline(p).startswith("ready")
        time.sleep(0.3)
        assert len(_slurm_signal(cg, signal.SIGUSR1)) == 2  # memscope and the training
        assert _readline(p) == "usr1 1\n"  # Slurm's copy alone: memscope passed none on
        assert _readline(p) == "step done 0\n"  # memscope lived to the run's end, and its status is the run's
        assert "Slurm signals every process of the step; not passed on" in p.stderr.read()
        s = json.loads(sj.read_text())
        assert s["exit"]["cause"] == "ok", s["exit"]
        assert [e["data"]["signal"] for e in events_of(s["record"], "signal_not_forwarded")] == ["SIGUSR1"]
    finally:
        _end(p)
        _rmdir_when_empty(cg)


def test_timeout_inside_a_slurm_job_is_still_passed_on(tmp_path):
    # `timeout 60 memscope run …` in a batch script: timeout signals memscope and its group, not the training (in a
    # session of its own). There the SIGTERM is memscope's alone and must reach the training.
    cg = _freezer_cgroup()
    if cg is None:
        pytest.skip("no writable cgroup v1 freezer here")
    ck, sj = tmp_path / "ckpt", tmp_path / "summary.json"
    p = _under_slurm(tmp_path, cg, "timeout 60 " + _memscope_words(tmp_path, ck, sj))
    try:
        assert _readline(p).startswith("ready")
        time.sleep(0.3)
        tmo = next(c for c in psutil.Process(p.pid).children() if c.name() == "timeout")
        os.kill(tmo.pid, signal.SIGTERM)
        assert _readline(p) == "checkpoint saved\n"
        err = p.stderr.read()
        assert ck.read_text() == "step 42\n" and "SIGTERM: passing it on" in err, err
    finally:
        _end(p)
        _rmdir_when_empty(cg)


# -- point 3: a stacks capture racing a child's exec ---------------------------------------------------------------
def test_stacks_requested_during_a_fork_exec_storm_kill_no_child(start):
    # A handler seen in /proc and the signal sent after it race the child's exec; the old stacks signal
    # (SIGRTMIN+6) killed by default, so a child that exec'd in between died (5 children over four runs).
    run = start([script("fork_exec_storm.py"), "10"])
    deadline = time.monotonic() + 60
    while not any(x.startswith("ready") for x in run.output_tail) and time.monotonic() < deadline:
        time.sleep(0.05)
    captures, asked = 0, 0
    while not run.ended and time.monotonic() < deadline:
        try:
            s = run.stacks()
        except Exception:
            break  # the run ended meanwhile
        captures += 1
        asked += len(s.processes)
    s = run.wait(60)
    out = [x for x in run.output_tail if x.startswith(("storm", "child"))]
    assert captures >= 5, (captures, out)
    assert any(x.startswith("storm: 0 of ") for x in out), (
        out,
        s["exit"]["message"],
        s["exit"]["traceback"],
    )  # no child died of a capture
    assert s["exit"]["cause"] == "ok", s["exit"]


# -- point 4: a stall capture must not wake a wait ---------------------------------------------------------------
def test_a_stall_capture_does_not_wake_a_worker_in_signal_pause(start):
    # --stall-after 5 on a worker in signal.pause() for SIGUSR1 at 12 s: it returned after 5.3 s (the capture's
    # signal ran a handler, and pause() returns after any). The capture now asks the agent's thread instead.
    run = start([script("pause_worker.py"), "6"], stall_after_s=2)
    s = run.wait(60)
    woke = [x for x in run.output_tail if x.startswith("worker woke")]
    assert len(woke) == 1 and woke[0].endswith("SIGUSR1: yes"), woke  # not woken before its signal
    assert float(woke[0].split()[3]) >= 5.5, woke
    stalls = [c for c in s["stacks"] if c["reason"] == "stall"]
    assert len(stalls) == 1, s["stacks"]  # the watch did capture: the stacks came without a signal
    worker = [p for p in stalls[0]["processes"] if p["pid"] != run.pid]
    assert worker and all(p["status"] == "ok" for p in worker), worker
    assert any(f["func"] == "<module>" for f in worker[0]["threads"][0]["frames"]), worker


# -- point 5: re-running an attach cell ----------------------------------------------------------------------------
def test_rerunning_an_attach_cell_never_signals_the_training_it_watches(tmp_path, monkeypatch):
    # `%memscope --attach PID`, the cell run again: the re-run stopped the previous run of the cell as Stop does,
    # and the training memscope never started got SIGINT (KeyboardInterrupt, exit -2).
    from IPython.core.interactiveshell import InteractiveShell

    from memscope import magic

    log = tmp_path / "signals.log"
    training = subprocess.Popen([PY, script("signal_log.py"), str(log)], stdout=subprocess.PIPE, text=True)
    runs = []
    try:
        assert _readline(training).startswith("ready")
        ip = InteractiveShell.instance()
        m = magic.MemscopeMagics(shell=ip)
        line = f"--record {tmp_path / 'runs'} --interval 0.05 --attach {training.pid}"
        for request in ("execute-1", "execute-2"):  # the same cell (JupyterLab's cellId), executed twice
            monkeypatch.setattr(magic, "_cell_request", lambda r=request: ("cell-A", r))
            runs.append(m.memscope(line))
            time.sleep(1.0)
        assert not log.exists() or log.read_text() == "", log.read_text()  # the re-run signalled nothing
        assert runs[0].wait(20) is not None and runs[0].summary()["exit"]["cause"] == "detached"
        runs[1].stop()  # the Stop button of an attached run: stop watching, nothing else
        assert runs[1].wait(20) is not None
        time.sleep(0.5)
        assert training.poll() is None  # still running
        assert not log.exists() or log.read_text() == "", log.read_text()  # and never got a signal
        for r in runs:
            assert events_of(r.record_path, "signal_sent") == []
    finally:
        for r in runs:
            if r is not None and not r.ended:
                r.detach()
        training.kill()
        training.wait()


# -- point 7: another local user's process that knows the run id --------------------------------------------------
@pytest.fixture
def other_user():
    if os.geteuid() != 0:
        pytest.skip("needs root to make a second user")
    name = f"mstest{os.getpid() % 100000}"
    subprocess.run(["userdel", "-r", name], capture_output=True)
    r = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"useradd failed: {r.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def test_another_users_process_with_the_run_id_is_not_adopted_nor_signalled(start, other_user, tmp_path):
    # The run id is readable by anyone (it names the record); a process of another user started with
    # MEMSCOPE_RUN_ID=<id> was counted in root's run and got SIGTERM and SIGKILL at its end.
    run = start([PY, "-c", "import time; print('ready', flush=True); time.sleep(4)"])
    shared = tempfile.mkdtemp()
    os.chmod(shared, 0o777)
    log = os.path.join(shared, "signals.log")
    # The shell names itself: a child it forks for `sleep` is also called "sh" until it execs, and was once
    # taken for the shell (gone 0.1 s later, it failed the is_running check below).
    trap = f'trap "echo TERM >> {log}" TERM; trap "echo INT >> {log}" INT; echo up $$; while :; do sleep 0.1; done'
    env = {"PATH": "/usr/bin:/bin", "MEMSCOPE_RUN_ID": run.run_id}
    stranger = subprocess.Popen(
        ["runuser", "-u", other_user, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], "sh", "-c", trap],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        word, pid = _readline(stranger).split()
        assert word == "up"
        shells = [psutil.Process(int(pid))]
        assert shells[0].name() == "sh" and shells[0].uids().real != 0
        s = run.wait(60)
        pids = {p["pid"] for p in s["processes"]}
        assert not pids & {stranger.pid, *(p.pid for p in shells)}, s["processes"]  # not counted in the run
        time.sleep(0.5)
        assert not os.path.exists(log) or open(log).read() == "", open(log).read()  # never signalled
        assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in shells)
    finally:
        for p in psutil.Process(stranger.pid).children(recursive=True):
            try:
                p.kill()
            except psutil.Error:
                pass
        stranger.kill()
        stranger.wait()


ESCAPEE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print("escapee", os.getpid(), flush=True)
        time.sleep(30)
        os._exit(0)
    os._exit(0)
time.sleep(30)
"""


def _gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_an_escapee_of_the_run_is_still_found_by_its_secret_key(start):
    # The marker moved from the public run id to a secret key: a double-forked daemon of the run's own (another
    # session, re-parented away) is still the run's, proven by the key in its environment.
    run = start([PY, "-c", ESCAPEE])
    deadline = time.monotonic() + 30
    while not any(x.startswith("escapee") for x in run.output_tail) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(next(x for x in run.output_tail if x.startswith("escapee")).split()[1])
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
    assert env[b"MEMSCOPE_RUN_ID"] == run.run_id.encode() and len(env[b"MEMSCOPE_RUN_KEY"]) == 32
    while pid not in run.tree.members() and time.monotonic() < deadline:
        time.sleep(0.1)
    found = run.tree.procs[pid]
    # Seen after its parent left, only the key proves it; seen in the moment before (CI's loaded machine saw it
    # once), its parent link did, and that is as true.
    assert found.proof == "marker" or (found.proof == "parent" and found.info.ppid != 1), found
    # The key alone, every time: a process no member started (this test's), whose environment carries the key.
    keyed = subprocess.Popen(
        [PY, "-c", "import time; time.sleep(30)"], start_new_session=True,
        env={**os.environ, "MEMSCOPE_RUN_ID": run.run_id, "MEMSCOPE_RUN_KEY": env[b"MEMSCOPE_RUN_KEY"].decode()},
    )  # fmt: skip
    try:
        while keyed.pid not in run.tree.members() and time.monotonic() < deadline + 15:
            time.sleep(0.1)
        assert run.tree.procs[keyed.pid].proof == "marker", run.tree.procs.get(keyed.pid)
        run.kill()
        run.wait(30)
        deadline = time.monotonic() + 10  # stopped with the run, as its own
        while not _gone(keyed.pid):
            assert time.monotonic() < deadline, "the keyed process outlived the run"
            time.sleep(0.05)
        assert _gone(pid)
    finally:
        if keyed.poll() is None:
            keyed.kill()
            keyed.wait()


# -- issue 30 point 5: a stall is the run's ------------------------------------------------------------------------
@pytest.mark.parametrize("every,stalls", [(2.0, 0), (0.0, 1)])
def test_a_wrapped_training_that_writes_its_log_is_not_a_stall(start, tmp_path, every, stalls):
    # `bash -c 'python train.py; true'`: the training prints to its own file every 2 s with --stall-after 5 (the
    # issue's 4 s and 60 s, scaled); the old rule saw little CPU and no output memscope captured: "no progress".
    # A training that sleeps and writes nothing is a stall: one capture, not one per window.
    log = tmp_path / "train.log"
    run = start(
        ["bash", "-c", '"$0" "$@"; true', PY, script("quiet_printer.py"), str(log), str(every), "14"],
        stall_after_s=5,
    )
    s = run.wait(90)
    got = [c for c in s["stacks"] if c["reason"] == "stall"]
    assert len(got) == stalls, [(c["t_s"], c.get("cpu_s")) for c in got]
    if every:
        assert len(log.read_text().splitlines()) >= 5  # it did write its log


def test_a_program_that_handles_the_stacks_signal_itself_is_told_why_and_not_signalled(start):
    # Point 10: a program with its own handler for the stacks signal was reported as "did not answer".
    run = start([script("own_sigurg_gil.py")])
    deadline = time.monotonic() + 30
    while "calling" not in list(run.output_tail) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    s = run.stacks()
    main = next(p for p in s.processes if p["pid"] == run.pid)
    assert main["status"] == "signal_taken", main
    assert "handles the stacks signal (SIGURG) itself: not signalled" in s.text, s.text
    time.sleep(0.5)
    assert "own handler called" not in list(run.output_tail)  # the capture never called the program's handler
    run.kill()
    run.wait(30)
