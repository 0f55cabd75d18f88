"""The tree sampler's PSS rounds against real processes that share pages."""

import os
import signal
import subprocess
import time

from conftest import PY, script

from memscope.collect import procfs, tree, tree_measure

MiB = 1 << 20


def total(sample) -> float:
    return sum(p.est_pss or 0 for p in sample.procs)


def settled(root: int) -> tuple[tree.TreeSampler, float]:
    """A sampler of ``root``'s tree (200 MiB shared) once a PSS round has set its bases, and its fast total."""
    s = tree.TreeSampler(root, lambda r: None, time.monotonic)
    s.discover()
    s.rss_round()
    s.pss_round()
    before = total(s.rss_round())
    assert before > 195 * MiB, before / MiB
    return s, before


def test_a_pss_round_torn_by_an_exit_keeps_the_bases_it_had(monkeypatch):
    # The parent is read, then its fork exits before the round reads it: the parent's PSS was read with the fork
    # still sharing its 200 MiB, so it holds half of them, and nobody holds the other half. Taken as the base,
    # the fast series would run 100 MiB low until the next round (seen: a HF Trainer tree 200 MiB low for 2 s).
    p = subprocess.Popen([PY, script("shares_with_a_fork.py")], stdout=subprocess.PIPE, text=True)
    try:
        child = int(p.stdout.readline())
        s, before = settled(p.pid)
        assert {p.pid, child} <= set(s.alive_pids())

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


def test_a_pss_round_torn_by_a_birth_keeps_the_bases_it_had(monkeypatch):
    # The parent forks after the round listed the tree and before it reads the parent: the parent's reading lacks
    # the fork's share of its 200 MiB, and the fork was not read. Taken as the base, the fast series would run
    # 100 MiB low until the next round (seen: a HF Trainer tree 70 MiB low for 1.5 s, an eval worker forked
    # while a slow round read the main).
    p = subprocess.Popen(
        [PY, script("shares_with_a_fork.py"), "--on-cue"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        s, before = settled(p.pid)

        real = procfs.read_smaps_rollup
        born = []

        def forks_mid_round(pid):
            if pid == p.pid and not born:
                p.stdin.write("fork\n")
                p.stdin.flush()
                born.append(int(p.stdout.readline()))
            return real(pid)

        monkeypatch.setattr(procfs, "read_smaps_rollup", forks_mid_round)
        torn = s.pss_round()
        monkeypatch.setattr(procfs, "read_smaps_rollup", real)
        assert born and [m.pid for m in torn.procs] == [p.pid]
        assert torn.procs[0].pss < 150 * MiB  # the parent's reading, shared with a fork nobody read
        assert born[0] in s.alive_pids() and s.pss_wanted

        after = total(s.rss_round())  # the parent's old base, and the fork's own (its parent's, at its birth)
        assert abs(after - before) < 10 * MiB, (before / MiB, after / MiB)
        again = total(s.pss_round())
        assert abs(again - before) < 10 * MiB, (before / MiB, again / MiB)
    finally:  # the fork exits with its parent
        p.kill()
        p.wait()


def test_under_constant_churn_every_fourth_torn_round_is_taken(monkeypatch):
    # Every round torn (a member that is gone whenever it is read) keeps the bases three times, then takes the
    # fourth: bases kept for ever would never see a fresher truth.
    p = subprocess.Popen([PY, script("sleeper.py"), "40"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("ready")
        s = tree.TreeSampler(p.pid, lambda r: None, time.monotonic)
        s.discover()
        s.rss_round()
        ghost = 1 << 22  # beyond pid_max: never a real process
        real_statm, real_rollup = procfs.read_statm, procfs.read_smaps_rollup

        def statm(pid):
            return (1, 0) if pid == ghost else real_statm(pid)

        def rollup(pid):
            return None if pid == ghost else real_rollup(pid)

        monkeypatch.setattr(procfs, "read_statm", statm)
        monkeypatch.setattr(procfs, "read_smaps_rollup", rollup)
        monkeypatch.setattr(s, "alive_pids", lambda: [p.pid, ghost])
        monkeypatch.setattr(tree_measure, "alive", lambda pid: pid != ghost)
        taken, wanted = [], []
        for _ in range(8):
            s.pss_round()
            age = s.pss_age(p.pid)
            taken.append(age is not None and age < 0.05)
            wanted.append(s.pss_wanted)  # a round kept asks for the next one soon
            time.sleep(0.1)
        assert taken == [False, False, False, True] * 2, taken
        assert wanted == [not x for x in taken]
    finally:
        p.kill()
        p.wait()
