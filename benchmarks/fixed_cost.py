"""memscope's fixed cost: what `memscope run` adds to a command that does nothing, at its start and its end.

    python benchmarks/fixed_cost.py               # 20 alternated pairs
    python benchmarks/fixed_cost.py --pairs 40 --out FILE
    python benchmarks/fixed_cost.py --quick       # 3 pairs: a CI smoke test

Each pair runs `python -c pass` plain and `memscope run --quiet -- python -c pass` (default settings, the agent
on), in alternating order, the interpreter named by its full path (no shim). Wall time is perf_counter around
the whole command; CPU is the children's user + system time from getrusage. The fixed cost is the median of the
per-pair differences, so the machine's drift over the run cancels out. A training of T seconds pays it once:
its wall ratio carries fixed_cost / T on top of the sampling overhead (benchmarks/overhead.py).

The commands run with their bytecode cached, as an installed memscope has it (pip compiles it at the install):
PYTHONDONTWRITEBYTECODE is taken out of their environment, so the first, uncounted run writes the __pycache__ of a
source checkout. With it set over a checkout that has none, every run compiles memscope's modules (the engine's,
and the agent's in the command) from source: about 0.1 s more CPU per run, which is not memscope's cost to a user.

Then one run under memscope with its start-up traced: how long each step of `memscope run` takes on this
machine (imports, the record, the launch, the end), to show where the remaining cost is.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hostinfo import emit, machine_rows  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PY = sys.executable  # the venv's interpreter itself (a shim such as pyenv's would add its own start-up)
# Bytecode written and read, as an installed package has it (see the docstring).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

# The steps of one `memscope run`, timed from inside (perf_counter since the interpreter's start).
TRACE = r"""
import sys, time
t0 = time.perf_counter()
marks = []
def mark(what):
    marks.append((what, time.perf_counter() - t0))
import memscope.cli as cli; mark("import memscope.cli")
import memscope.session.run; mark("import memscope.session.run (the engine)")
import memscope.session.launch as launch, memscope.session.finish as finish, memscope.supervise as sup
_launch, _wait_root, _finish = launch.launch, sup.wait_root, finish.finish
def traced_launch(run):
    mark("the run and its record created"); _launch(run); mark("the command launched, the threads going")
def traced_wait_root(pid):
    r = _wait_root(pid); mark("the command exited (reaped)"); return r
def traced_finish(run):
    _finish(run); mark("the end: last rounds, summary, record closed")
launch.launch, sup.wait_root, finish.finish = traced_launch, traced_wait_root, traced_finish
cli.main(["run", "--quiet", "--record", sys.argv[1], "--", sys.argv[2], "-c", "pass"])
mark("memscope run returned")
for what, t in marks:
    print(f"{t:.4f}\t{what}")
"""


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and the children's CPU seconds of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(pairs: int, record_dir: str) -> dict[str, list[float]]:
    plain_cmd = [PY, "-c", "pass"]
    ms_cmd = [PY, "-m", "memscope", "run", "--quiet", "--record", record_dir, "--", PY, "-c", "pass"]
    timed(ms_cmd)  # the first run warms the page cache and the bytecode cache: not counted
    out: dict[str, list[float]] = {"plain_wall": [], "plain_cpu": [], "ms_wall": [], "ms_cpu": []}
    for i in range(pairs):
        order = [("plain", plain_cmd), ("ms", ms_cmd)]
        if i % 2:
            order.reverse()
        for name, cmd in order:
            wall, cpu = timed(cmd)
            out[f"{name}_wall"].append(wall)
            out[f"{name}_cpu"].append(cpu)
    return out


def trace(record_dir: str) -> list[tuple[float, str]]:
    p = subprocess.run([PY, "-c", TRACE, record_dir, PY], capture_output=True, text=True, cwd=REPO, check=True, env=ENV)
    rows = []
    for line in p.stdout.splitlines():
        t, _, what = line.partition("\t")
        rows.append((float(t), what))
    return rows


def report(m: dict[str, list[float]], steps: list[tuple[float, str]], pairs: int) -> str:
    diff_wall = [a - b for a, b in zip(m["ms_wall"], m["plain_wall"])]
    diff_cpu = [a - b for a, b in zip(m["ms_cpu"], m["plain_cpu"])]

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):.3f} s (min {min(xs):.3f}, max {max(xs):.3f})"

    lines = [
        "| | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in machine_rows(load_when="at the end")),
        "",
        f"{pairs} alternated pairs, `python -c pass` plain and under `memscope run --quiet` (default settings):",
        "",
        "| | median (min, max) |",
        "|---|---|",
        f"| plain, wall | {med(m['plain_wall'])} |",
        f"| memscope run, wall | {med(m['ms_wall'])} |",
        f"| **fixed cost (per-pair difference), wall** | **{statistics.median(diff_wall):.3f} s** |",
        f"| plain, CPU | {med(m['plain_cpu'])} |",
        f"| memscope run, CPU | {med(m['ms_cpu'])} |",
        f"| fixed cost, CPU | {statistics.median(diff_cpu):.3f} s |",
        "",
        "One `memscope run` traced from inside (seconds since its interpreter started; the interpreter's own start "
        "comes before 0):",
        "",
        "| at | step |",
        "|---|---|",
        *(f"| {t:.3f} s | {what} |" for t, what in steps),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=20, help="alternated pairs (20)")
    ap.add_argument("--quick", action="store_true", help="3 pairs: a CI smoke test")
    ap.add_argument("--out", metavar="FILE", help="also write the Markdown report here")
    ns = ap.parse_args(argv)
    pairs = 3 if ns.quick else ns.pairs
    with tempfile.TemporaryDirectory(prefix="memscope-fixed-") as d:
        m = measure(pairs, d)
        steps = trace(d)
    emit(report(m, steps, pairs), ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
