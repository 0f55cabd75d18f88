"""The psutil path (macOS) must import and sample; forced here on Linux against a real process."""

import subprocess
import time

from conftest import PY, script

from memscope.collect import portable, tree, tree_measure, tree_membership


def test_psutil_backend_samples_a_real_tree(monkeypatch):
    p = subprocess.Popen([PY, script("sleeper.py"), "40"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("ready")
        for part in (tree, tree_membership, tree_measure):  # the sampler's parts, each reading the platform
            monkeypatch.setattr(part, "procfs", portable)
        records = []
        s = tree.TreeSampler(p.pid, records.append, time.monotonic)
        s.discover()
        rss = s.rss_round()
        pss = s.pss_round()
        assert rss.procs[0].pid == p.pid and rss.procs[0].rss > 40 << 20
        assert pss.procs[0].pss and pss.procs[0].pss > 38 << 20  # USS stands in for PSS
        assert any(type(r).__name__ == "ProcessSeen" and r.role == "main" for r in records)
    finally:
        p.kill()
