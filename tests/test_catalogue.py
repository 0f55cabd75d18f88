"""`memscope ls` and `memscope report` over a directory of records: order, and records that are not what they
seem (issue 22, #12 and #13)."""

import json
import os
import shutil
import sqlite3
import subprocess
import time

import pytest
from conftest import PY, script

import memscope

MEMSCOPE = [PY, "-m", "memscope.cli"]


def memscope_cli(*args, timeout=120):
    return subprocess.run([*MEMSCOPE, *args], capture_output=True, text=True, timeout=timeout)


def test_report_last_is_the_run_that_started_last_within_one_second(tmp_path):
    runs = str(tmp_path / "runs")
    for _ in range(5):  # until three runs start within one second (each start takes some tens of ms)
        started = [
            memscope.run([PY, script("clean.py"), "0.05"], record_dir=runs, output="capture", interval_s=0.05)
            for _ in range(3)
        ]
        for r in started:
            r.wait(60)
        ids = [r.run_id for r in started]
        if len({i[:15] for i in ids}) == 1:  # the id starts with the start's second
            break
    assert len({i[:15] for i in ids}) == 1, ids
    rep = memscope_cli("report", "last", "--record", runs, "--json")
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["run_id"] == ids[-1]
    listed = [line.split()[0] for line in memscope_cli("ls", "--record", runs).stdout.splitlines()]
    assert listed[-3:] == ids  # ls in the order the runs started, not of their ids' random part


def _two_runs(runs):
    started = [memscope.run([PY, script("clean.py"), "0.05"], record_dir=runs, output="capture") for _ in range(2)]
    for r in started:
        r.wait(60)
    return [r.run_id for r in started], started[-1].record_path


def _variant(src, dst, run_id, t0, run_sets, events=None):
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    con.execute("UPDATE run SET id=?, t0_epoch=?", (run_id, t0))
    for col, v in run_sets.items():
        con.execute(f"UPDATE run SET {col}=?", (v,))
    if events is not None:
        con.execute("UPDATE events SET data=?", (events,))
    con.commit()
    con.close()


def test_records_of_the_wrong_shape_cost_one_line_not_the_directory(tmp_path):
    runs = tmp_path / "runs"
    good, src = _two_runs(str(runs))
    t0 = time.time() + 100
    # Valid JSON, wrong shapes: a summary whose peak is a string, columns of the wrong type...
    _variant(src, runs / "a.sqlite", "a-run", t0, {"summary": '{"peak": "big", "exit": 5}', "duration_s": "x"})
    # ...a summary and events that are lists...
    _variant(src, runs / "b.sqlite", "b-run", t0 + 1, {"summary": "[1]"}, events="[1, 2]")
    # ...events whose fields have the wrong types (the summary is recomputed from them)...
    _variant(src, runs / "c.sqlite", "c-run", t0 + 2, {"summary": None}, events='{"returncode": "x"}')
    # ...and a run row without an id: no record.
    _variant(src, runs / "d.sqlite", None, t0 + 3, {})
    ls = memscope_cli("ls", "--record", str(runs))
    assert ls.returncode == 0 and "Traceback" not in ls.stderr, ls.stderr
    listed = [line.split()[0] for line in ls.stdout.splitlines()]
    assert listed == [*good, "a-run", "b-run", "c-run"], ls.stdout
    assert ls.stderr.count("\n") == 1 and "d.sqlite" in ls.stderr and "skipped" in ls.stderr, ls.stderr
    rep = memscope_cli("report", "b-run", "--record", str(runs), "--json")  # the list events left out
    assert rep.returncode == 0, rep.stderr
    s = json.loads(rep.stdout)  # recomputed without the events: the end unknown, the memory still there
    assert s["exit"]["cause"] == "unknown" and s["peak"]["tree_rss_bytes"] > 0, s["exit"]
    # What cannot be read at all (a run row whose columns have the wrong types): one line.
    rep = memscope_cli("report", "a-run", "--record", str(runs))
    assert rep.returncode == 2 and "Traceback" not in rep.stderr, rep.stderr
    assert rep.stderr.count("\n") == 1 and "a.sqlite is not a readable memscope record" in rep.stderr, rep.stderr
    # Events of the wrong types cost only the summary's sections that read them (each section has its own guard):
    # the end is unknown, the memory is still there.
    rep = memscope_cli("report", "last", "--record", str(runs))
    assert rep.returncode == 0 and "Traceback" not in rep.stderr, rep.stderr
    assert "memscope: unknown" in rep.stdout and "c.sqlite" in rep.stdout and "peak tree PSS" in rep.stdout, rep.stdout


def test_a_fifo_named_like_a_record_is_never_opened(tmp_path):
    runs = tmp_path / "runs"
    good, _ = _two_runs(str(runs))
    os.mkfifo(runs / "zzz.sqlite")  # sorts last: before, ls and report blocked opening it
    ls = memscope_cli("ls", "--record", str(runs), timeout=30)
    assert ls.returncode == 0 and [line.split()[0] for line in ls.stdout.splitlines()] == good
    assert "zzz.sqlite" in ls.stderr and "not a regular file" in ls.stderr
    rep = memscope_cli("report", "last", "--record", str(runs), "--json", timeout=30)
    assert rep.returncode == 0 and json.loads(rep.stdout)["run_id"] == good[-1], rep.stderr


@pytest.mark.parametrize("how", ["script", "python"])
def test_a_fifo_named_train_py_is_refused_in_one_line(tmp_path, how):
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    cmd = [str(fifo)] if how == "script" else ["--", PY, str(fifo)]
    p = memscope_cli("run", "--quiet", "--record", str(tmp_path / "runs"), *cmd, timeout=30)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "not a regular file" in p.stderr
    assert not (tmp_path / "runs").exists() or os.listdir(tmp_path / "runs") == []


def test_a_non_utf8_argument_does_not_make_the_record_unreadable(tmp_path):
    runs = str(tmp_path / "runs")
    argv = [*MEMSCOPE, "run", "--quiet", "--record", runs, "--", PY, script("clean.py"), "0.05", "0"]
    p = subprocess.run([os.fsencode(a) for a in argv] + [b"\xff"], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "page.html"
    rep = memscope_cli("report", "last", "--record", runs, "--html", str(out))
    assert rep.returncode == 0, rep.stderr
    page = out.read_text(encoding="utf-8")  # valid UTF-8: the byte is written as an escape
    assert page.lstrip().startswith("<!DOCTYPE html>") and "\\udcff" in page


@pytest.mark.parametrize("url", ["not a url", "http://a b:9090", "http://host\x07:9090"])
def test_cluster_with_no_url_is_one_line(url):
    p = memscope_cli("cluster", url, timeout=30)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and "not a Prometheus URL" in p.stderr, p.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e9"])
def test_prometheus_linger_is_checked_before_the_run(tmp_path, value):
    runs = tmp_path / "runs"
    p = memscope_cli(
        "run", "--quiet", "--record", str(runs), "--prometheus-linger", value, script("clean.py"), "0.05", timeout=30
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--prometheus-linger" in p.stderr, p.stderr
    assert "finished" not in p.stdout and not runs.exists()  # nothing ran
    with pytest.raises(memscope.LaunchError, match="prometheus_linger_s"):
        memscope.run([PY, script("clean.py"), "0.05"], record_dir=str(runs), prometheus_linger_s=float(value))
