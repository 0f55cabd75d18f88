"""Kaggle's image (CI's Kaggle stage): its own sitecustomize.py sits in the interpreter's directory (it imports
wrapt and adds a meta-path finder). memscope's agent shadows it on PYTHONPATH and must chain to it: Kaggle's finder
still runs in every process of the run, and memscope still collects its evidence from inside them."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig

import pytest
from conftest import script

pytestmark = pytest.mark.skipif(
    os.environ.get("MEMSCOPE_TEST_STACK") != "kaggle",
    reason="runs in CI's Kaggle replica (Kaggle's sitecustomize installed): see .ci/run",
)


def test_kaggles_sitecustomize_is_the_interpreters_own():
    spec = importlib.util.find_spec("sitecustomize")
    assert spec is not None and os.path.dirname(spec.origin) == sysconfig.get_paths()["stdlib"], spec
    out = subprocess.run(
        [sys.executable, "-c", "import sys; print([type(f).__name__ for f in sys.meta_path])"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "GcpModuleFinder" in out, out


def test_a_torch_training_with_two_workers_ends_ok_under_kaggles_sitecustomize(tmp_path):
    pytest.importorskip("torch")
    from memscope.record.catalogue import find_run
    from memscope.record.reader import RunData

    runs, summary = tmp_path / "runs", tmp_path / "s.json"
    p = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "memscope"),
            "run",
            "--record",
            str(runs),
            "--summary-json",
            str(summary),
            script("kaggle_train.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    # Kaggle's finder ran in the main and in each worker (the agent chained to Kaggle's sitecustomize).
    assert "MAIN FINDERS" in p.stdout and "GcpModuleFinder" in p.stdout.split("MAIN FINDERS")[1].split("\n")[0]
    assert " True" in p.stdout.split("MAIN FINDERS")[1].split("\n")[0]  # wrapt imported by it
    workers = re.findall(r"WORKER FINDERS (\S+)", p.stdout)
    assert len(workers) == 4 and all("GcpModuleFinder" in f for f in workers), p.stdout
    s = json.loads(summary.read_text())
    assert s["exit"]["cause"] == "ok", s["exit"]
    roles = [q["role"] for q in s["processes"]]
    assert roles.count("dataloader_worker") == 4 and roles.count("main") == 1, roles
    # memscope's own evidence from inside: every process's agent said hello, and the main's phases were seen.
    rd = RunData(find_run(str(runs), "last"))
    try:
        hello = {e["pid"] for e in rd.events("agent_hello")}
        phases = [e["data"].get("name") for e in rd.events("phase")]
    finally:
        rd.close()
    assert {q["pid"] for q in s["processes"]} <= hello, (hello, s["processes"])
    assert "train" in phases and "eval" in phases, phases
