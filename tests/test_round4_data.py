"""Issue 32, the fourth adversarial round, its data points: prune touches only what is memscope's and nothing still
being written (6), secrets on the command line never reach a record, a page or a label, and records are not
readable by other users (8), bad records and flags are one clear line (9), the words about cut output are true
(10), the old ``memscope.runner`` import still works (11). Real files, real users, real memscope processes."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import PY

MEMSCOPE = [PY, "-m", "memscope.cli"]


def cli(*args: str, timeout: float = 90, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*MEMSCOPE, *args], capture_output=True, text=True, timeout=timeout, **kw)


# -- 11: last month's API ---------------------------------------------------------------------------------------
def test_the_old_runner_import_still_runs_a_run_and_warns(tmp_path):
    script = tmp_path / "old_api.py"
    script.write_text(
        "import sys\n"
        "from memscope.runner import Run, Options\n"
        f"r = Run([sys.executable, '-c', 'print(41 + 1)'], options=Options(record_dir={str(tmp_path / 'runs')!r},"
        " output='capture')).start()\n"
        "s = r.wait(60)\n"
        "print('cause', s['exit']['cause'], list(r.output_tail))\n"
    )
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "cause ok ['42']" in p.stdout, p.stdout
    # The warning names the script's line, so that a person knows what to change.
    assert f"{script}:2: DeprecationWarning: memscope.runner is deprecated" in p.stderr, p.stderr
    assert "from memscope import Run, Options" in p.stderr
