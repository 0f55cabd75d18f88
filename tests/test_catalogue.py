"""`memscope ls` and `memscope report` over a directory of records: order, and records that are not what they
seem (issue 22, #12 and #13)."""

import json
import subprocess

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
