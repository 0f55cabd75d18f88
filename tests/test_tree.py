"""The tree sampler's PSS rounds against real processes that share pages."""
import os
import signal
import subprocess
import time

from conftest import PY, script

from memscope.collect import procfs, tree

MiB = 1 << 20


def total(sample) -> float:
    return sum(p.est_pss or 0 for p in sample.procs)


def test_a_pss_round_torn_by_an_exit_keeps_the_bases_it_had(monkeypatch):
    # The parent is read, then its fork exits before the round reads it: the parent's PSS was read with the fork
    # still sharing its 200 MiB, so it holds half of them, and nobody holds the other half. Taken as the base,
    # the fast series would run 100 MiB low until the next round (seen: a HF Trainer tree 200 MiB low for 2 s).
    p = subprocess.Popen([PY, script("shares_with_a_fork.py")], stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())
        s = tree.TreeSampler(p.pid, lambda r: None, time.monotonic)
        s.discover()
        s.rss_round()
        s.pss_round()
        assert {p.pid, child} <= set(s.alive_pids())
        before = total(s.rss_round())
        assert before > 195 * MiB, before / MiB

        real = procfs.read_smaps_rollup

        def exits_mid_round(pid):
            if pid == child:
                os.kill(child, signal.SIGKILL)  # our own grandchild
                assert p.stdout.readline().strip() == "reaped"
            return real(pid)

        monkeypatch.setattr(procfs, "read_smaps_rollup", exits_mid_round)
        assert s.alive_pids().index(p.pid) < s.alive_pids().index(child)  # the parent is read first
        torn = s.pss_round()
        monkeypatch.setattr(procfs, "read_smaps_rollup", real)
        assert [m.pid for m in torn.procs] == [p.pid]
        assert torn.procs[0].pss < 150 * MiB  # the torn reading itself: the parent holds only half the pages
        assert s.pss_wanted  # the next round comes as soon as the budget allows

        after = total(s.rss_round())  # the exit is seen: the child's share goes to the parent's old base
        assert abs(after - before) < 10 * MiB, (before / MiB, after / MiB)
        again = total(s.pss_round())
        assert abs(again - before) < 10 * MiB, (before / MiB, again / MiB)
    finally:
        p.kill()
        p.wait()
