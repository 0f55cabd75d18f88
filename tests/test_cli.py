"""`memscope run | ls | report` as a user types them, in real subprocesses."""

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import PY, alive, script

from memscope.analysis import summary as summary_mod

MEMSCOPE = [PY, "-m", "memscope.cli"]


def memscope(*args, timeout=120, **kw):
    return subprocess.run([*MEMSCOPE, *args], capture_output=True, text=True, timeout=timeout, **kw)


def test_exit_status_is_the_commands_own_and_summary_json_is_written(tmp_path):
    out = tmp_path / "summary.json"
    p = memscope(
        "run", "--quiet", "--record", str(tmp_path / "runs"), "--summary-json", str(out), script("clean.py"), "0.2", "3"
    )
    assert p.returncode == 3, p.stderr
    s = json.loads(out.read_text())
    assert s["exit"]["cause"] == "exit_nonzero" and s["exit"]["code"] == 3
    assert "finished" in p.stdout  # the command's own output passes through


def test_segfault_exits_139_and_report_reproduces_the_summary(tmp_path):
    runs = str(tmp_path / "runs")
    out = tmp_path / "s.json"
    p = memscope("run", "--quiet", "--record", runs, "--summary-json", str(out), script("segfault.py"))
    assert p.returncode == 128 + signal.SIGSEGV
    live = json.loads(out.read_text())
    rep = memscope("report", live["run_id"][:15], "--record", runs, "--json")
    assert rep.returncode == 0, rep.stderr
    again = json.loads(rep.stdout)
    assert again["exit"] == live["exit"] and again["peak"] == live["peak"]
    ls = memscope("ls", "--record", runs)
    assert live["run_id"] in ls.stdout and "segfault" in ls.stdout


def test_report_html_without_a_path_writes_run_id_html_here(tmp_path):
    runs = str(tmp_path / "runs")
    out = tmp_path / "s.json"
    p = memscope("run", "--quiet", "--record", runs, "--summary-json", str(out), script("clean.py"), "0.1")
    assert p.returncode == 0, p.stderr
    run_id = json.loads(out.read_text())["run_id"]
    here = tmp_path / "here"
    here.mkdir()
    rep = memscope("report", "last", "--record", runs, "--html", cwd=str(here))
    assert rep.returncode == 0, rep.stderr
    page = here / f"{run_id}.html"
    assert rep.stdout.strip() == f"memscope: report written to {page}"
    assert page.read_text().lstrip().startswith("<!DOCTYPE html>")
    assert os.listdir(here) == [page.name]


def test_command_after_double_dash_and_final_lines(tmp_path):
    p = memscope("run", "--record", str(tmp_path), "--", "bash", script("train_stage_2.sh"), "clean.py", "0.2")
    assert p.returncode == 0, p.stderr
    assert "stage 2 starting" in p.stdout and "finished" in p.stdout
    assert "memscope: ok" in p.stderr and "peak tree PSS" in p.stderr


BAD = [
    (["run", "missing.py"], "missing.py: no such file"),
    (["run", "tests"], "is a directory"),
    (["run", "--", "no-such-command-xyz"], "no-such-command-xyz: command not found"),
    (["run", "--", "{here}/scripts/not_executable.sh"], "is not executable"),
    (["run", "{here}/scripts/bad_syntax.py"], "SyntaxError"),
    (["run", "--bogus", "x.py"], "unrecognized arguments: --bogus"),
    (["run", "--attach", "999999999"], "no process with pid 999999999"),
    (["run", "--record", "/proc/memscope-cannot", "{here}/scripts/clean.py"], "record directory"),
    (["run"], "no command given"),
    (["report", "nope", "--record", "{tmp}"], "no run 'nope'"),
    (["run", "--limit", "lots", "x.py"], "not a size"),
    (["run", "--limit", "8ib", "x.py"], "not a size"),
    (["run", "--limit", "9" * 30 + "T", "x.py"], "too large a size"),
    (["run", "--limit", "1" + "0" * 400, "x.py"], "too large a size"),
    (["run", "--limit", "0", "x.py"], "more than 0"),
    (["run", "--interval", "nan", "x.py"], "must be a number of seconds"),
    (["run", "--interval", "inf", "x.py"], "must be a number of seconds"),
    (["run", "--interval", "0", "x.py"], "must be a number of seconds"),
    (["run", "--pss-interval", "inf", "x.py"], "must be a number of seconds"),
    (["run", "--grace", "nan", "x.py"], "must be a number of seconds"),
    (["run", "--grace", "soon", "x.py"], "not a number"),
    (["run", "--record", "{tmp}", "--summary-json", "{tmp}", "{here}/scripts/clean.py"], "is a directory"),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_gets_one_clear_line_and_nothing_runs(args, expected, tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    (tmp_path / "x").mkdir()
    args = [a.format(here=here, tmp=tmp_path / "x") for a in args]
    before = set(os.listdir(tmp_path / "x"))
    p = memscope(*args, cwd=os.path.dirname(here))
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memscope: "), p.stderr
    assert expected in lines[0]
    assert "Traceback" not in p.stderr
    assert set(os.listdir(tmp_path / "x")) == before  # no record left behind


def _record(path, summary=None, samples=200):
    from memscope.model import HostSample, ProcessSeen, ProcMem, RunEnded, TreeSample
    from memscope.record.writer import Recorder

    rec = Recorder(str(path))
    rec.begin("r1", ["x.py"], "/", "2026-01-01T00:00:00", 0.0, 10, {})
    rec.put(ProcessSeen(0.0, 10, 1, "main", "python", "python x.py", 0.0))
    for i in range(samples):
        rec.put(TreeSample(i * 0.1, "rss", (ProcMem(10, (100 + i) << 20),)))
        rec.put(HostSample(i * 0.1, 8 << 30, 4 << 30, 0, 0, None, None, 0, None))
    if summary is not None:
        rec.put(RunEnded(1.0, summary))
    rec.close()
    return path


def _bad_file(kind, d):
    import sqlite3

    path = d / "bad.sqlite"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "corrupt":
        path.write_bytes(os.urandom(8192))
    elif kind == "truncated":
        _record(path, samples=3000)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
        for suffix in ("-wal", "-shm"):
            if os.path.exists(str(path) + suffix):
                os.unlink(str(path) + suffix)
    elif kind == "foreign":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE photos (id INTEGER, name TEXT)")
        con.commit()
        con.close()
    elif kind == "foreign_run_table":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE run (id TEXT, summary TEXT)")
        con.execute("INSERT INTO run VALUES ('x', '{')")
        con.commit()
        con.close()
    elif kind == "summary_json":
        path = d / "summary.json"
        path.write_text('{"schema": "memscope.summary/1", "exit": ')
    return path


@pytest.mark.parametrize("kind", ["empty", "corrupt", "truncated", "foreign", "foreign_run_table", "summary_json"])
def test_report_on_a_file_that_is_no_record_says_one_line(kind, tmp_path):
    path = _bad_file(kind, tmp_path)
    for extra in ([], ["--json"], ["--html", str(tmp_path / "r.html")]):
        p = memscope("report", str(path), *extra)
        assert p.returncode == 2, (kind, extra, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "is not a readable memscope record" in lines[0], p.stderr
        assert "Traceback" not in p.stderr
    assert not os.path.exists(tmp_path / "r.html")


def test_report_on_a_record_with_a_damaged_summary_recomputes_it(tmp_path):
    import sqlite3

    path = _record(tmp_path / "r.sqlite", summary={"exit": {"cause": "ok"}, "peak": {}})
    con = sqlite3.connect(path)
    con.execute("UPDATE run SET summary='{\"exit\": [', meta='not json'")
    con.commit()
    con.close()
    p = memscope("report", str(path), "--json")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["exit"]["cause"] == "unknown"  # the record holds no exit: said so, not invented
    assert s["peak"]["tree_rss_bytes"] == (100 + 199) << 20


def test_markup_in_the_record_path_is_printed_as_text(tmp_path):
    rec = tmp_path / "rec[/x]" / "[bold]runs"
    p = memscope("run", "--record", str(rec), script("clean.py"), "0.1")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and f"record {rec}" in p.stderr.replace("\n", "")


def test_ctrl_c_stops_the_whole_tree(tmp_path):
    out = tmp_path / "s.json"
    p = subprocess.Popen(
        [
            *MEMSCOPE,
            "run",
            "--quiet",
            "--grace",
            "0.5",
            "--record",
            str(tmp_path),
            "--summary-json",
            str(out),
            script("stubborn_tree.py"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "tree ready"
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)  # what Ctrl-C does to memscope (the run has its own session)
    p.wait(timeout=30)
    s = json.loads(out.read_text())
    assert s["exit"]["cause"] == "stopped_by_user"
    pids = [x["pid"] for x in s["processes"]]
    assert len(pids) >= 3 and alive(pids) == []


def test_attach_watches_a_running_tree_and_notices_its_end(tmp_path):
    target = subprocess.Popen([PY, script("sleeper.py"), "40"], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().startswith("ready")
        out = tmp_path / "s.json"
        p = subprocess.Popen(
            [
                *MEMSCOPE,
                "run",
                "--quiet",
                "--interval",
                "0.05",
                "--record",
                str(tmp_path),
                "--summary-json",
                str(out),
                "--attach",
                str(target.pid),
            ]
        )
        time.sleep(2.5)
        target.kill()
        target.wait()
        assert p.wait(timeout=30) == 0
        s = json.loads(out.read_text())
        assert s["processes"][0]["pid"] == target.pid
        assert s["peak"]["tree_rss_bytes"] > 40 << 20
        assert s["peak"]["tree_pss_bytes"] > 38 << 20
    finally:
        target.kill()


def test_memscope_killed_keeps_a_readable_record_and_the_training_goes_on(tmp_path, monkeypatch):
    runs = str(tmp_path / "runs")
    p = subprocess.Popen(
        [*MEMSCOPE, "run", "--quiet", "--interval", "0.05", "--record", runs, script("sleeper.py"), "24"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    child = int(line.split()[1])
    time.sleep(2.0)
    p.kill()  # memscope itself dies, without any chance to clean up
    p.wait()
    try:
        assert alive([child]) == [child]  # the training was not harmed
        rep = memscope("report", "last", "--record", runs, "--json")
        assert rep.returncode == 0, rep.stderr
        s = json.loads(rep.stdout)
        # The training is alive: the record says "running" (its record so far), not how it ended.
        assert s["exit"]["cause"] == "running", s["exit"]
        assert "record stopped" not in s["exit"]["message"]  # killed a moment ago: not yet known to be unwatched
        # Samples up to about the last second before the kill are in the record.
        assert s["duration_s"] >= 1.0
        assert s["peak"]["tree_rss_bytes"] > 24 << 20
        # Silent for longer than a watched run's record ever is (the threshold lowered here, not waited out): the
        # card says the run goes on unwatched.
        monkeypatch.setattr(summary_mod, "STALE_RECORD_S", 0.0)
        time.sleep(1.0)  # > 10 sampling periods of 0.05 s
        (record,) = [str(f) for f in (tmp_path / "runs").glob("*.sqlite")]
        again = summary_mod.mark_running(record, dict(s, exit=dict(s["exit"], cause="unknown")))
        assert again["exit"]["cause"] == "running"
        assert "record stopped" in again["exit"]["message"] and "unwatched" in again["exit"]["message"]
    finally:
        os.kill(child, signal.SIGKILL)


# `memscope run` in a fresh interpreter: the analyses are imported once the command is launched, on a thread of
# their own, and here that import is held back (a finder that waits on it) until the end has asked for the
# summary: the end must wait for the whole module, and the summary be the run's own.
SLOW_ANALYSES = r"""
import json, sys, threading, time
import memscope.cli as cli, memscope.session.finish as finish, memscope.supervise as sup
seen = {}
asked = threading.Event()
class HoldBack:
    def find_spec(self, name, path=None, target=None):
        if name == "memscope.analysis.advice" and "held" not in seen:  # inside analysis.summary's import
            seen["held"] = threading.current_thread().name
            asked.wait(30)  # until the end asks for the summary (a generous deadline: never a hang)
            time.sleep(0.2)  # and reaches the import
        return None
sys.meta_path.insert(0, HoldBack())
_launch, _summarize = sup.launch, finish.summarize_record
def launch(*a, **k):
    seen["analyses_before_launch"] = "memscope.analysis.summary" in sys.modules
    return _launch(*a, **k)
def summarize_record(state):  # the run's state (session/state.RunState)
    seen["root_exited_when_asked"] = state.root_exited.is_set()
    asked.set()
    return _summarize(state)
sup.launch, finish.summarize_record = launch, summarize_record
rc = cli.main(["run", "--quiet", "--record", sys.argv[1], "--summary-json", sys.argv[2], "--", "sh", "-c", "exit 7"])
print(json.dumps(dict(seen, rc=rc)))
"""


def test_the_end_waits_for_analyses_still_loading_and_its_summary_is_right(tmp_path):
    out = tmp_path / "s.json"
    p = subprocess.run(
        [PY, "-c", SLOW_ANALYSES, str(tmp_path / "runs"), str(out)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout.splitlines()[-1])
    assert seen["analyses_before_launch"] is False  # the start did not wait on them
    assert seen["held"] == "memscope-analyses"  # they load on their own thread, after the launch
    assert seen["root_exited_when_asked"] is True and seen["rc"] == 7
    s = json.loads(out.read_text())
    assert s["exit"]["cause"] == "exit_nonzero" and s["exit"]["code"] == 7, s["exit"]
    assert "record_errors" not in s


# `memscope` leaves without the interpreter's teardown once its work is closed: the exit handlers still run, the
# output is all there, the status is the command's, and a thread that is not a daemon is still waited for.
CONSOLE = r"""
import atexit, sys, threading, time
atexit.register(lambda: print("exit handler ran", flush=True))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True))).start()
sys.argv = ["memscope", "run", "--record", sys.argv[2], "--", "sh", "-c", "echo from the command; exit 5"]
from memscope.cli import console_main
console_main()
"""


@pytest.mark.parametrize("case", ["plain", "thread"])
def test_the_console_exit_keeps_the_handlers_the_output_and_the_status(case, tmp_path):
    p = subprocess.run([PY, "-c", CONSOLE, case, str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 5, p.stderr
    assert "from the command" in p.stdout and "exit handler ran" in p.stdout
    assert "memscope: exit_nonzero" in p.stderr  # memscope's final lines are all there
    if case == "thread":
        assert "thread finished" in p.stdout
