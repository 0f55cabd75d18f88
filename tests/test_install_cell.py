"""The notebooks' first cell, as a Colab or Kaggle user runs it in a kernel that has no memscope yet: CI points
MEMSCOPE_INSTALL_PYTHON at its replica of Colab's runtime (before memscope is in it) and MEMSCOPE_DIST at the built
wheel. Every failure is one line that says what to do, never a traceback; with Internet off (pip's index out of
reach) the wheel alone installs memscope, from what the image already ships. The last test leaves memscope
installed there: that is how CI's Colab stage installs it."""

import glob
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.environ.get("MEMSCOPE_INSTALL_PYTHON")
DIST = os.environ.get("MEMSCOPE_DIST")
pytestmark = pytest.mark.skipif(
    not (PYTHON and DIST),
    reason="CI's Colab stage sets MEMSCOPE_INSTALL_PYTHON and MEMSCOPE_DIST (a replica without memscope)",
)


def _run_first_cell(tmp_path, src, offline=True):
    nb = json.load(open(os.path.join(ROOT, "notebooks", "01-quickstart.ipynb")))
    cell = "".join(next(c for c in nb["cells"] if c["cell_type"] == "code")["source"])
    (tmp_path / "cell.ipy").write_text(cell + "\nimport memscope; print('IMPORTED', memscope.__file__)\n")
    # A kernel's environment: no other virtualenv active (IPython would warn about it in the cell's output).
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(MEMSCOPE_SRC=src, PYDEVD_DISABLE_FILE_VALIDATION="1")
    if offline:  # Kaggle's default: no index to reach (a git address cannot be reached from here either)
        env["PIP_NO_INDEX"] = "1"
    p = subprocess.run(
        [
            PYTHON,
            "-m",
            "IPython",
            "--no-banner",
            "--colors=NoColor",
            "--TerminalInteractiveShell.term_title=False",
            str(tmp_path / "cell.ipy"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return [line for line in (p.stdout + p.stderr).splitlines() if line.strip() and not line.startswith("0.00s")]


@pytest.mark.parametrize(
    "src, says",
    [
        ("/kaggle/input/nothing/memscope_ml-0.1.0-py3-none-any.whl", "memscope: no wheel at /kaggle/input/nothing/"),
        (
            "git+https://github.com/example/memscope",
            "memscope: could not install git+https://github.com/example/memscope (fatal: unable to access",
        ),
        ("/no/such/clone", "memscope: /no/such/clone is neither a wheel, a git address nor a folder"),
    ],
)
def test_a_failure_is_one_line_that_says_what_to_do(tmp_path, src, says):
    lines = _run_first_cell(tmp_path, src)
    assert len(lines) == 1 and lines[0].startswith(says), lines
    assert "Traceback" not in lines[0]
    if src.startswith("git+"):
        assert "turn it on (Kaggle: Settings > Internet on), or attach memscope's wheel" in lines[0]


def test_with_internet_off_the_wheel_alone_installs_memscope(tmp_path):
    wheel = glob.glob(os.path.join(DIST, "memscope_ml-*.whl"))[0]
    lines = _run_first_cell(tmp_path, wheel)
    assert len(lines) == 1 and lines[0].startswith("IMPORTED ") and "site-packages" in lines[0], lines
