"""The main of a run is the Python process that did the training's work, whatever wraps it (a script's stages,
a pipe, `tee`, a process that renamed itself), and what was recorded inside a process is never dropped because a
wrapper exited 0 or the process re-executed itself. Real processes, tiny scripts."""

import shlex

import pytest
from conftest import PY, script

from memscope.collect.roles import ProcInfo, classify


def pids_running(s, name):
    """The processes (not the shell) whose command line names ``name``."""
    return [p["pid"] for p in s["processes"] if name in (p["cmdline"] or "") and not p["cmdline"].startswith("bash")]


def role_of(s, pid):
    return next(p["role"] for p in s["processes"] if p["pid"] == pid)


def sh(*argv):
    return " ".join(shlex.quote(a) for a in argv)


def test_script_stages_blame_the_stage_that_raised_not_the_one_that_exited_0(start):
    s = start(["bash", script("stages.sh"), PY, "raises.py"]).wait(60)
    [train] = pids_running(s, "raises.py")
    [prep] = pids_running(s, "stage_prep.py")
    ex = s["exit"]
    assert ex["cause"] == "exception" and ex["pid"] == train, ex
    assert ex["message"].startswith("ValueError: bad batch 3")
    assert role_of(s, train) == "main" and role_of(s, prep) != "main"


def test_script_stages_segfault_in_stage_two_is_blamed_on_stage_two(start):
    s = start(["bash", script("stages.sh"), PY, "segfault.py"]).wait(60)
    [train] = pids_running(s, "segfault.py")
    ex = s["exit"]
    assert ex["cause"] == "segfault" and ex["pid"] == train and ex["code"] == 139, ex
    assert "segfault.py, line 6 in collate" in ex["message"]
    assert role_of(s, train) == "main"


def test_pipe_blames_the_end_that_raised(start):
    cmd = f"{sh(PY, script('stage_prep.py'))} | {sh(PY, script('raises.py'))}"
    s = start(["bash", "-c", cmd]).wait(60)
    [train] = pids_running(s, "raises.py")
    ex = s["exit"]
    assert ex["cause"] == "exception" and ex["pid"] == train, ex
    assert "without an uncaught Python exception" not in ex["message"]


def test_tee_exits_0_and_the_exception_is_still_the_verdict(start, tmp_path):
    cmd = f"{sh(PY, script('raises.py'))} 2>&1 | tee {sh(str(tmp_path / 'log'))}"
    run = start(["bash", "-c", cmd])
    s = run.wait(60)
    [train] = pids_running(s, "raises.py")
    ex = s["exit"]
    assert run.returncode == 0
    assert ex["cause"] == "exception" and ex["pid"] == train and ex["code"] == 0, ex
    assert ex["message"].startswith("ValueError: bad batch 3")
    assert f"(pid {run.pid}) exited 0" in ex["message"] and "hid the failure" in ex["message"]
    assert "bad batch 3" in (tmp_path / "log").read_text()


def test_a_training_that_renamed_itself_behind_bash_is_the_main(start):
    # `; exit $?` keeps bash from exec'ing the command: bash is the root, Python its child, retitled.
    run = start(["bash", "-c", f"{sh(PY, script('renames_itself.py'))}; exit $?"])
    s = run.wait(60)
    ex = s["exit"]
    [train] = pids_running(s, "trainer: epoch 1")
    assert train != run.pid
    assert ex["cause"] == "exception" and ex["pid"] == train, ex
    assert ex["message"].startswith("ValueError: failed under a new name")
    assert role_of(s, train) == "main" and role_of(s, run.pid) == "wrapper"


@pytest.mark.parametrize("how", ["isolated", "cleared"])
def test_reexec_into_an_image_without_agent_is_not_said_to_be_without_exception(start, how):
    run = start([PY, script("reexec.py"), how])
    s = run.wait(60)
    ex = s["exit"]
    assert ex["cause"] == "exit_nonzero" and ex["code"] == 1 and ex["pid"] == run.pid, ex
    assert "without an uncaught Python exception" not in ex["message"]
    assert "re-executed itself after its agent said hello" in ex["message"]
    assert "reexec.py second" in ex["message"]


def test_excepthook_that_ends_with_os_exit_still_leaves_the_exception(start):
    run = start([PY, script("hook_os_exit.py")])
    s = run.wait(60)
    ex = s["exit"]
    assert ex["cause"] == "exception" and ex["code"] == 1, ex
    assert ex["message"].startswith("RuntimeError: eaten by the hook at hook_os_exit.py, line 13")
    assert "logged: RuntimeError: eaten by the hook" in run.output_tail


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_multiprocessing_child_segfault_is_named_in_the_verdict(start, method):
    run = start([PY, script("mp_child_segfault.py"), method])
    s = run.wait(60)
    ex = s["exit"]
    assert "child exit code -11" in run.output_tail
    children = [p["pid"] for p in s["processes"] if p["exit_signal"] == "SIGSEGV"]
    assert len(children) == 1, s["processes"]
    child = children[0]
    assert role_of(s, child) not in ("helper", "main")
    assert ex["cause"] == "ok" and ex["pid"] == run.pid, ex
    assert f"pid {child} (other) of the run died of SIGSEGV in mp_child_segfault.py, line 7 in crash" in ex["message"]
    assert "Fatal Python error: Segmentation fault" in ex["traceback"]


# -- the choice itself, on process tables (pure) ------------------------------------------------------------------
BASH = ("bash", "-c", "python train.py | python filter.py")


def test_pipe_ends_both_exited_0_the_one_that_worked_is_the_main():
    procs = {
        5: ProcInfo(5, 1, "bash", BASH, alive=False),
        6: ProcInfo(6, 5, "python", ("python", "train.py"), alive=False, cpu=900),
        7: ProcInfo(7, 5, "python", ("python", "filter.py"), alive=False, cpu=20),
    }
    assert classify(procs, 5) == {5: "wrapper", 6: "main", 7: "other"}
    # While train.py's reader still runs after train.py exited, it is the live main; its failure decides too.
    procs[7] = ProcInfo(7, 5, "python", ("python", "filter.py"), cpu=20)
    assert classify(procs, 5)[7] == "main"
    procs[7] = ProcInfo(7, 5, "python", ("python", "filter.py"), alive=False, cpu=20, failed_at=2.0)
    assert classify(procs, 5)[7] == "main"


def test_the_first_failure_wins_over_its_consequences():
    # gen.py | train.py: train.py raised at 1.0; gen.py then failed writing to the closed pipe.
    procs = {
        5: ProcInfo(5, 1, "bash", BASH, alive=False),
        6: ProcInfo(6, 5, "python", ("python", "gen.py"), alive=False, cpu=500, failed_at=1.5),
        7: ProcInfo(7, 5, "python", ("python", "train.py"), alive=False, cpu=10, failed_at=1.0),
    }
    assert classify(procs, 5)[7] == "main"


def test_phases_reported_beat_cpu_and_a_fork_of_the_main_is_never_a_candidate():
    procs = {
        5: ProcInfo(5, 1, "bash", ("bash", "job.sh"), alive=False),
        6: ProcInfo(6, 5, "python", ("python", "tokenize.py"), alive=False, cpu=5000),
        7: ProcInfo(7, 5, "python", ("python", "train.py"), alive=False, cpu=800, phases=3),
        8: ProcInfo(8, 7, "python", ("python", "train.py"), alive=False, cpu=9000, failed_at=1.0),
    }
    assert classify(procs, 5) == {5: "wrapper", 6: "other", 7: "main", 8: "other"}


def test_a_retitled_process_is_known_by_its_agents_argv_and_forkserver_children_are_not_helpers():
    fs = ("python", "-c", "from multiprocessing.forkserver import main; main(3, 4)")
    procs = {
        5: ProcInfo(5, 1, "bash", ("bash", "-c", "python train.py; exit $?")),
        6: ProcInfo(6, 5, "trainer", ("trainer: epoch 1",), agent_argv=("python", "train.py")),
        7: ProcInfo(7, 6, "python", fs),
        8: ProcInfo(8, 7, "python", fs),
    }
    assert classify(procs, 5) == {5: "wrapper", 6: "main", 7: "helper", 8: "other"}
