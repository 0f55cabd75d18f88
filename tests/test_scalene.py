"""Scalene snapshots (issue 6) on real runs, and the core's exit causes again with the script under Scalene."""

import html
import os
import signal
import time

import pytest
from conftest import PY, has_torch, script, wait_for_output

import memscope
from memscope.analysis.exit_cause import ExitEvidence, decide
from memscope.analysis.scalene import diff_profiles
from memscope.cli import build_parser
from memscope.collect.roles import ProcInfo, classify
from memscope.errors import LaunchError, ScaleneError
from memscope.session import scalene as scalene_mod
from memscope.ui.scalene import snapshots_html

needs_scalene = pytest.mark.skipif(not scalene_mod.available(), reason="scalene not installed")


def marked_line(path, mark):
    with open(path) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {mark}"))


def roles(summary):
    return {p["pid"]: p["role"] for p in summary["processes"]}


def main_pid(run, timeout=60.0):
    """The process Scalene runs the script in (its launcher's child), once memscope has named it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mains = [pid for pid, d in list(run.snapshot.procs.items()) if d.get("role") == "main" and pid != run.pid]
        if mains:
            return mains[0]
        time.sleep(0.05)
    raise AssertionError(f"no main under Scalene's launcher: {run.snapshot.procs}")


# -- a real run, real snapshots ----------------------------------------------------------------------------------


@needs_scalene
def test_snapshots_show_each_window_hot_line_and_the_run_still_ends_ok(start, tmp_path):
    busy = script("scalene_busy.py")
    switch, stop = str(tmp_path / "switch"), str(tmp_path / "stop")
    run = start([busy, switch, stop], scalene=True)
    wait_for_output(run, "ready", 60)
    first = run.scalene_snapshot(2)
    open(switch, "w").close()
    wait_for_output(run, "switched", 30)
    second = run.scalene_snapshot(2)
    open(stop, "w").close()
    s = run.wait(120)

    line_a, line_b = marked_line(busy, "HOT-A"), marked_line(busy, "HOT-B")
    rows1 = {(r["file"], r["line"]): r for r in first.top}
    rows2 = {(r["file"], r["line"]): r for r in second.top}
    assert (busy, line_a) in rows1 and (busy, line_b) not in rows1, first.top
    # Scalene's JSON is cumulative (line A is still in it): the second window must show only what ran in it.
    assert (busy, line_b) in rows2 and (busy, line_a) not in rows2, second.top
    hot = rows2[(busy, line_b)]
    assert hot["cpu_percent"] > 0 and hot["cpu_percent"] == pytest.approx(
        hot["python_percent"] + hot["native_percent"], abs=0.02
    )
    assert "i ^ 7" in hot["code"]
    assert first.pid == second.pid != run.pid and first.index == 1 and second.index == 2

    # Scalene's on/off signals are not crashes: the run ends as the script does.
    assert s["exit"]["cause"] == "ok", s["exit"]
    r = roles(s)
    assert r[run.pid] == "wrapper" and r[first.pid] == "main"
    assert [x["index"] for x in s["scalene"]] == [1, 2]
    assert line_b in [row["line"] for row in s["scalene"][1]["top"]]
    # Scalene's own report of the run, written beside the record in the background.
    # It is whole once it exists (renamed into place), and the folder it was rendered in goes right after.
    folder = os.path.dirname(second.html_path)
    rendering = lambda: [n for n in os.listdir(folder) if n.startswith(".html-")]  # noqa: E731
    deadline = time.monotonic() + 90
    while not os.path.exists(second.html_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert os.path.getsize(second.html_path) > 10000
    while rendering() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rendering() == []
    assert os.path.dirname(os.path.dirname(second.html_path)).startswith(run.record_path[: -len(".sqlite")])


@needs_scalene
def test_memory_mode_reports_the_allocating_line(start, tmp_path):
    stop = str(tmp_path / "stop")
    alloc = script("scalene_alloc.py")
    run = start([alloc, stop], scalene="memory")
    wait_for_output(run, "ready", 60)
    snap = run.scalene_snapshot(2)
    open(stop, "w").close()
    s = run.wait(60)
    row = next(r for r in snap.top if r["line"] == marked_line(alloc, "ALLOC"))
    assert row["malloc_mb"] >= 4 and row["mallocs"] >= 1 and "<<" in row["code"]
    assert s["exit"]["cause"] == "ok"


@needs_scalene
@pytest.mark.skipif(not has_torch(), reason="needs torch")
def test_snapshot_leaves_dataloader_workers_alive(start, tmp_path):
    # Scalene forwards "off" (SIGBUS) to every forked child; PyTorch's worker handler dies of it, and the training
    # then fails with "DataLoader worker ... is killed by signal: Bus error". The agent keeps workers out of it.
    stop = str(tmp_path / "stop")
    loader = script("scalene_loader.py")
    run = start([loader, stop], scalene=True)
    wait_for_output(run, "training", 120)
    snap = run.scalene_snapshot(2)
    open(stop, "w").close()
    s = run.wait(120)
    assert s["exit"]["cause"] == "ok", s["exit"]
    assert sorted(roles(s).values()).count("dataloader_worker") == 2
    assert marked_line(loader, "HOT") in [r["line"] for r in snap.top]


# -- the core's exit causes, under Scalene ---------------------------------------------------------------------


def _kill_main(run):
    wait_for_output(run, "ready", 60)
    os.kill(main_pid(run), signal.SIGKILL)


def _stop(run):
    wait_for_output(run, "ready", 60)
    run.stop()


@needs_scalene
@pytest.mark.parametrize(
    "argv, act, cause, check",
    [
        (["clean.py", "0.3"], None, "ok", lambda ex: ex["code"] == 0),
        (["clean.py", "0.1", "3"], None, "exit_nonzero", lambda ex: ex["code"] == 3),
        (
            ["raises.py"],
            None,
            "exception",
            lambda ex: (
                ex["message"].startswith("ValueError: bad batch 3")
                and "raises.py, line 2 in validate" in ex["message"]
                and "scalene_probe" not in ex["traceback"]
            ),
        ),
        (
            ["segfault.py"],
            None,
            "segfault",
            lambda ex: ex["signal"] == "SIGSEGV" and "segfault.py, line 6 in collate" in ex["message"],
        ),
        (
            ["sleeper.py", "16"],
            _kill_main,
            "killed",
            lambda ex: ex["signal"] == "SIGKILL" and "no OOM counter rose" in ex["message"],
        ),
        (["sleeper.py", "16"], _stop, "stopped_by_user", lambda ex: True),
    ],
    ids=["ok", "exit_nonzero", "exception", "segfault", "killed", "stopped_by_user"],
)
def test_exit_causes_under_scalene(start, argv, act, cause, check):
    run = start([script(argv[0]), *argv[1:]], scalene="cpu")
    if act is not None:
        act(run)
    s = run.wait(90)
    ex = s["exit"]
    assert ex["cause"] == cause, ex
    assert check(ex), ex
    r = roles(s)
    assert r[run.pid] == "wrapper" and r[ex["pid"]] == "main", (r, ex)


# -- the pieces, without a run -------------------------------------------------------------------------------


def test_scalene_relaunch_child_is_the_main():
    cmd = f"{PY} -m scalene run --off --cpu-only -o /r/profile.json /w/train.py --- --epochs 3"
    procs = {
        10: ProcInfo(10, 1, "python", tuple(cmd.split())),
        11: ProcInfo(11, 10, "python", tuple(cmd.split())),
        12: ProcInfo(12, 11, "pt_data_worker", tuple(cmd.split())),
    }
    assert classify(procs, 10, script="/w/train.py") == {10: "wrapper", 11: "main", 12: "dataloader_worker"}


def test_scalene_launcher_status_names_the_childs_signal():
    # Scalene's launcher exits with sys.exit(-N) (status 256-N) when the profiled child dies of signal N.
    ev = ExitEvidence(root_pid=10, returncode=256 - 9, main_pid=11, roles={10: "wrapper", 11: "main"}, scalene=True)
    assert decide(ev)["cause"] == "killed" and decide(ev)["signal"] == "SIGKILL"
    ev.scalene = False  # the same status from any other wrapper is just a status
    assert decide(ev)["cause"] == "exit_nonzero"


def test_cli_scalene_flag_never_swallows_the_script():
    p = build_parser()
    assert p.parse_args(["run", "--scalene", "train.py", "--x"]).scalene == "cpu"
    ns = p.parse_args(["run", "--scalene=memory", "train.py"])
    assert ns.scalene == "memory" and ns.command == ["train.py"]
    assert p.parse_args(["run", "train.py", "--scalene=memory"]).scalene is None


def test_only_python_scripts_can_run_under_scalene(record_dir):
    with pytest.raises(LaunchError, match="needs a Python script"):
        memscope.run(["bash", script("train_stage_2.sh"), "raises.py"], record_dir=record_dir, scalene=True)
    with pytest.raises(LaunchError, match="'cpu' or 'memory'"):
        memscope.run([script("clean.py")], record_dir=record_dir, scalene="gpu")


def test_a_run_without_scalene_says_how_to_get_snapshots(start):
    run = start([script("clean.py"), "5"])
    with pytest.raises(ScaleneError, match="--scalene train.py"):
        run.scalene_snapshot(1)
    run.kill()


def test_diff_of_cumulative_profiles_and_escaped_html():
    def profile(elapsed, lines):
        return {
            "elapsed_time_sec": elapsed,
            "files": {
                "/w/t<x>.py": {
                    "lines": [
                        {
                            "lineno": n,
                            "line": code,
                            "n_cpu_percent_python": py,
                            "n_cpu_percent_c": c,
                            "n_sys_percent": 0.0,
                            "n_malloc_mb": 0.0,
                        }
                        for n, code, py, c in lines
                    ]
                }
            },
        }

    # 4 s of CPU, all on line 1; then 4 s more, all on line 2: cumulative shares are 50/50 of 8 s.
    first = (profile(4.0, [(1, "a()", 100.0, 0.0)]), 4.0)
    second = (profile(8.0, [(1, "a()", 50.0, 0.0), (2, "b() # \\u003cscript\\u003e", 25.0, 25.0)]), 8.0)
    rows, window_s, cpu_s = diff_profiles(first, second, memory=False)
    assert (window_s, cpu_s) == (4.0, 4.0)
    assert [(r["line"], r["cpu_percent"], r["native_percent"]) for r in rows] == [(2, 100.0, 50.0)]
    assert rows[0]["code"] == "b() # <script>"
    page = snapshots_html(
        [
            {
                "index": 1,
                "t_s": 1.0,
                "window_s": window_s,
                "cpu_s": cpu_s,
                "pid": 5,
                "top": rows,
                "mode": "cpu",
                "html_path": "/r/<b>.html",
            }
        ]
    )
    assert "<script>" not in page and html.escape("b() # <script>") in page and "&lt;b&gt;.html" in page


# -- the dashboard's button ------------------------------------------------------------------------------------


def _wait_for(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.1)
    return cond()


def test_button_on_a_run_without_scalene_says_how_to_get_it(start):
    from memscope.ui.dashboard import Dashboard

    d = Dashboard(start([script("clean.py"), "5"]))
    try:
        assert "%memscope --scalene train.py" in d._action("scalene")
    finally:
        d.close()


@needs_scalene
def test_button_takes_a_snapshot_and_lists_it(start, tmp_path, monkeypatch):
    from memscope.ui import dashboard, dashboard_buttons

    monkeypatch.setattr(dashboard_buttons, "SCALENE_SECONDS", 1.5)  # the button's window, shortened for the test
    busy = script("scalene_busy.py")
    run = start([busy, str(tmp_path / "switch"), str(tmp_path / "stop")], scalene=True)
    wait_for_output(run, "ready", 60)
    d = dashboard.Dashboard(run)
    try:
        assert "profiling" in d._action("scalene")
        assert _wait_for(lambda: "Scalene snapshot #1" in d.scalene.widget.value), d.controls.note
        assert f"scalene_busy.py:{marked_line(busy, 'HOT-A')}" in d.scalene.widget.value
        assert "Scalene snapshot #1" in d.controls.note
    finally:
        d.close()
        run.stop()
