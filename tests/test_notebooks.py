"""Level 2: the notebooks, executed top to bottom by nbclient in a real kernel (their last cells assert).

Each notebook reproduces one seed incident at small scale; CI runs them all, so each stays under about a minute."""

import glob
import os
import shutil
import subprocess

import pytest
from conftest import KERNEL, has_torch

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


@pytest.mark.skipif(not has_torch(), reason="the notebooks train with torch")
@pytest.mark.skipif(
    os.environ.get("MEMSCOPE_NOTEBOOKS_IN_REPLICA") == "1",
    reason="CI runs the notebooks in its Colab-with-torch replica (Colab's kernel and pins, the wheel): see .ci/run",
)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs_and_its_checks_pass(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name=KERNEL, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert "ok" in "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    views = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert views  # the dashboard was displayed as widgets
    assert os.listdir(tmp_path / ".memscope" / "runs")  # recorded in the notebook's directory
    # Run in a clone, the notebook leaves the repository clean: what it wrote beside itself is git-ignored.
    made = sorted(f for f in os.listdir(tmp_path) if f not in (".memscope", "__pycache__", ".ipynb_checkpoints"))
    if made and shutil.which("git") and os.path.exists(os.path.join(ROOT, ".git")):
        check = subprocess.run(
            ["git", "check-ignore", "--no-index", *[f"notebooks/{f}" for f in made]],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert sorted(check.stdout.split()) == [f"notebooks/{f}" for f in made], "not ignored: see notebooks/.gitignore"


def test_notebooks_are_saved_clean_install_memscope_first_and_end_with_their_checks():
    assert len(NOTEBOOKS) >= 8
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        name = os.path.basename(path)
        assert not [c for c in code if c.get("outputs") or c.get("execution_count")], f"{name} has outputs"
        # Colab/Kaggle: the first code cell installs memscope when it is missing, from the repository, never by
        # name from PyPI (another project owns "memscope" there).
        assert "MEMSCOPE_SRC" in code[0].source and "pip" in code[0].source, name
        assert '"memscope"]' not in code[0].source, name
        # ... and accepts a wheel (Kaggle with Internet off: attached as a dataset); failures are one line.
        assert "memscope_ml-*.whl" in code[0].source and "_render_traceback_" in code[0].source, name
        assert "assert" in code[-1].source and "print(" in code[-1].source and "ok" in code[-1].source, name
