"""Issue 22 #1: the agent never writes to, reads from or closes a descriptor number the program was handed.

A program that closes its inherited descriptors (as daemonizers do) and opens its own file and TCP connection on
the agent's old numbers, then switches train/eval and enters memscope.phase: its file holds only what it wrote,
its peer receives only what it sent, and the run ends ok."""

import json

import pytest
from conftest import has_torch, script

from memscope.record.reader import RunData

pytestmark = pytest.mark.skipif(not has_torch(), reason="torch is not installed")


def _report(run):
    lines = [ln for ln in run.output_tail if ln.startswith("{")]
    assert lines, list(run.output_tail)[-10:]
    return json.loads(lines[-1])


def test_a_program_that_closes_the_low_descriptors_keeps_its_file_and_connection(start):
    run = start([script("closes_fds.py"), "low"])
    s = run.wait(120)
    got = _report(run)
    assert got["ok"], got
    assert s["exit"]["cause"] == "ok", s["exit"]
    # The agent's descriptors sit above the program's range: closerange(3, 256) left them, and it is still heard.
    assert got["held"] and min(got["held"]) >= 256 and not got["placed"], got
    rd = RunData(s["record"])
    try:
        names = [e["data"]["name"] for e in rd.events("phase") if e["data"].get("state") == "start"]
        marks = [e["data"]["text"] for e in rd.events("mark")]
    finally:
        rd.close()
    assert names.count("after_close") == 3 and marks.count("after close") == 3


def test_a_program_given_the_agents_numbers_keeps_its_file_and_connection(start):
    # python-daemon closes up to the descriptor limit: the agent's numbers are freed and handed to the program's
    # own file and TCP connection. The agent sees they are no longer its own and goes quiet.
    run = start([script("closes_fds.py"), "all"])
    s = run.wait(120)
    got = _report(run)
    assert got["ok"], got
    assert got["placed"] == got["held"], got  # the program really sat on every number the agent held
    assert s["exit"]["cause"] == "ok", s["exit"]
    assert s["exit"]["code"] == 0


def test_a_crash_after_the_program_took_the_numbers_dumps_into_memscopes_file_not_the_programs(start):
    # faulthandler writes from C, with no check: once the agent finds its socket's number taken, it re-arms
    # faulthandler on a descriptor of its own. The program's file keeps its content; memscope still gets the
    # Python stack of the segfault.
    import os

    run = start([script("closes_fds.py"), "all-crash"])
    s = run.wait(120)
    got = _report(run)
    assert got["placed"], got
    with open(got["path"], "rb") as f:
        content = f.read()
    os.unlink(got["path"])
    assert content == b"program data\nend\n", content[:500]
    assert s["exit"]["cause"] == "segfault", s["exit"]
    assert "closes_fds.py" in (s["exit"]["traceback"] or ""), s["exit"]
