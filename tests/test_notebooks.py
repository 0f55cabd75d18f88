"""Level 2: the notebooks, executed top to bottom by nbclient in a real kernel (their last cells assert)."""
import glob
import os

import pytest

from conftest import has_torch

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


@pytest.mark.skipif(not has_torch(), reason="the notebooks train with torch")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs_and_its_checks_pass(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert "ok" in "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    views = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert views  # the dashboard was displayed as widgets
    assert os.listdir(tmp_path / ".memscope" / "runs")  # recorded in the notebook's directory
