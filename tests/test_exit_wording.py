"""The words of an ending by a signal that is not SIGKILL, on real processes (issue 22, #14)."""

import json
import os
import signal
import subprocess

from conftest import PY, script

MEMSCOPE = [PY, "-m", "memscope.cli"]


def _run(tmp_path, *args, prefix=(), **kw):
    sj = tmp_path / "s.json"
    argv = [*prefix, *MEMSCOPE, "run", "--quiet", "--record", str(tmp_path / "runs"), "--summary-json", str(sj)]
    return subprocess.Popen([*argv, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw), sj


def _advice(s):
    return " ".join(a["text"] for a in s["advice"] if a.get("topic") == "exit")


def test_a_sigterm_from_outside_is_called_sigterm(tmp_path):
    p, sj = _run(tmp_path, script("sleeper.py"), "8")
    try:
        main = int(p.stdout.readline().split()[1])
        os.kill(main, signal.SIGTERM)  # not to memscope: to the training, as a scheduler on its node might
        assert p.wait(60) == 128 + signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
    s = json.loads(sj.read_text())
    assert s["exit"]["signal"] == "SIGTERM" and "SIGTERM from outside memscope" in s["exit"]["message"]
    assert "SIGTERM came from outside" in _advice(s) and "SIGKILL" not in _advice(s), s["advice"]


def test_a_sigpipe_from_head_is_called_a_closed_pipe(tmp_path):
    sj = tmp_path / "s.json"
    cmd = " ".join([*MEMSCOPE, "run", "--quiet", "--record", str(tmp_path / "runs"), "--summary-json", str(sj)])
    p = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {cmd} -- yes | head -1"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 128 + signal.SIGPIPE and p.stdout == "y\n", p.stderr
    s = json.loads(sj.read_text())
    assert s["exit"]["signal"] == "SIGPIPE" and "pipe whose reader had already closed it" in s["exit"]["message"]
    assert "from outside" not in s["exit"]["message"]
    assert "closed pipe" in _advice(s) and "SIGKILL" not in _advice(s), s["advice"]


def test_timeouts_sigcont_is_no_step_of_the_stop(tmp_path):
    # timeout -s INT sends SIGINT then SIGCONT (to memscope and to its group); memscope no longer passes SIGCONT on.
    p, sj = _run(tmp_path, script("sleeper.py"), "8", prefix=["timeout", "-s", "INT", "3"])
    try:
        assert p.stdout.readline().startswith("ready")
        assert p.wait(60) == 124
    finally:
        if p.poll() is None:
            p.kill()
    s = json.loads(sj.read_text())
    assert s["exit"]["cause"] == "stopped_by_user", s["exit"]
    assert "SIGCONT" not in s["exit"]["message"] and "SIGINT" in s["exit"]["message"], s["exit"]["message"]
