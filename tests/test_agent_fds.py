"""Issue 22 #1: the agent never writes to, reads from or closes a descriptor number the program was handed.

A program that closes its inherited descriptors (as daemonizers do) and opens its own file and TCP connection on
the agent's old numbers, then switches train/eval and enters memscope.phase: its file holds only what it wrote,
its peer receives only what it sent, and the run ends ok."""

import json
import os
import resource
import shutil

import pytest
from conftest import PY, has_torch, script

from memscope.agent import fds
from memscope.record.reader import RunData

pytestmark = pytest.mark.skipif(not has_torch(), reason="torch is not installed")


SOFT, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)
# A descriptor limit where the agent does not lift its descriptors above the limit (a soft limit above
# fds.MAX_LIFTED, which only lowering the hard one sets without privileges): they sit at a high number below
# it, and only the check before each use keeps them.
_FALLBACK = HARD if HARD != resource.RLIM_INFINITY else 70000
BELOW_LIMIT = ["prlimit", f"--nofile={_FALLBACK}:{_FALLBACK}", "--", PY]
needs_prlimit = pytest.mark.skipif(
    shutil.which("prlimit") is None or _FALLBACK <= fds.MAX_LIFTED, reason="no prlimit, or a hard limit too low"
)


def _phases_and_marks(s):
    rd = RunData(s["record"])
    try:
        names = [e["data"]["name"] for e in rd.events("phase") if e["data"].get("state") == "start"]
        marks = [e["data"]["text"] for e in rd.events("mark")]
    finally:
        rd.close()
    return names, marks


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


@needs_prlimit
def test_a_program_given_the_agents_numbers_keeps_its_file_and_connection(start):
    # python-daemon closes up to the descriptor limit: the agent's numbers are freed and handed to the program's
    # own file and TCP connection. The agent sees they are no longer its own and goes quiet.
    run = start([*BELOW_LIMIT, script("closes_fds.py"), "all"])
    s = run.wait(120)
    got = _report(run)
    assert got["ok"], got
    assert got["placed"] == got["held"], got  # the program really sat on every number the agent held
    assert s["exit"]["cause"] == "ok", s["exit"]
    assert s["exit"]["code"] == 0


@needs_prlimit
@pytest.mark.parametrize("mode", ["all-crash", "fault-crash"])
def test_a_crash_after_the_program_took_the_numbers_dumps_into_memscopes_file_not_the_programs(start, mode):
    # faulthandler writes from C, with no check: once the agent finds its number taken, it re-arms faulthandler
    # on a descriptor of its own. The program's file keeps its content; memscope still gets the Python stack of
    # the segfault. fault-crash: faulthandler's number alone is taken, the socket stays the agent's (it used to
    # be checked only when the socket's was taken).
    run = start([*BELOW_LIMIT, script("closes_fds.py"), mode])
    s = run.wait(120)
    got = _report(run)
    assert got["placed"], got
    with open(got["path"], "rb") as f:
        content = f.read()
    os.unlink(got["path"])
    assert content == b"program data\nend\n", content[:500]
    assert s["exit"]["cause"] == "segfault", s["exit"]
    assert "closes_fds.py" in (s["exit"]["traceback"] or ""), s["exit"]


def test_a_thread_racing_the_agent_can_never_be_handed_its_numbers(start):
    # Issue 22 #1: a check before each use leaves a window between the check and the use, which another thread
    # of the program can hit (dup2 onto the agent's number in between). The agent's descriptors sit at or above
    # the descriptor limit, where open() and dup2() never hand out a number: the racing thread places nothing,
    # and the agent goes on reporting.
    # The usual soft limit of 1024 (below the hard one, as on most machines): room above it.
    if shutil.which("prlimit") is None or HARD != resource.RLIM_INFINITY and HARD < 1024 + fds.SPAN:
        pytest.skip("no prlimit, or a hard limit too low")
    soft = 1024
    run = start(
        [
            "prlimit",
            f"--nofile={soft}:{HARD if HARD != resource.RLIM_INFINITY else 'unlimited'}",
            "--",
            PY,
            script("closes_fds.py"),
            "race",
        ]
    )
    s = run.wait(120)
    got = _report(run)
    assert got["ok"] and got["placed"] == [], got
    agent_fds = [n for n in got["held"] if n >= soft]
    assert len(agent_fds) >= 2, got  # the socket and faulthandler's file, at least
    assert s["exit"]["cause"] == "ok", s["exit"]
    names, marks = _phases_and_marks(s)
    assert names.count("after_close") == 3 and marks.count("after close") == 3
