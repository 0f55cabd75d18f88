"""memscope's own CPU and memory while the run it watches gives birth to many short-lived processes.

    python benchmarks/churn.py [--rates 10 50 200] [--seconds 20] [--out FILE]

For each rate, ``memscope run --quiet`` (the CLI, in its own process) watches a Python script that forks that
many children a second, each living 0.2 s (a busy multiprocessing pool, a shell loop). The memscope process's CPU
time (user + system, from /proc) and its RSS are read from outside every second; CPU% is over the steady window
(after the first 3 s), and the RSS figures show whether memory grows with the number of processes ever seen.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The forking script the supervisor's churn test runs too.
CHILD = os.path.join(REPO, "tests", "scripts", "churn.py")


def _cpu_rss(pid: int) -> tuple[float, int]:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    cpu = (int(parts[11]) + int(parts[12])) / tick
    with open(f"/proc/{pid}/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def measure(rate: float, seconds: float, life: float = 0.2) -> dict:
    tmp = tempfile.mkdtemp(prefix="memscope-churn-")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memscope.cli",
            "run",
            "--quiet",
            "--record",
            tmp,
            "--summary-json",
            os.path.join(tmp, "s.json"),
            "--",
            sys.executable,
            CHILD,
            str(rate),
            str(seconds),
            str(life),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    points = []
    t0 = time.monotonic()
    while p.poll() is None:
        try:
            c, r = _cpu_rss(p.pid)
        except (OSError, IndexError, ValueError):
            break
        points.append((time.monotonic() - t0, c, r))
        time.sleep(1.0)
    out = p.communicate()[0]
    births = next((int(line.split()[1]) for line in out.splitlines() if line.startswith("births")), None)
    steady = [pt for pt in points if 3.0 <= pt[0] <= seconds]
    cpu_pct = None
    if len(steady) >= 2:
        cpu_pct = 100 * (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0])
    rss = [pt[2] for pt in steady] or [pt[2] for pt in points]
    with open(os.path.join(tmp, "s.json")) as f:
        s = json.load(f)
    return {
        "rate_per_s": rate,
        "births": births,
        "seconds": seconds,
        "memscope_cpu_percent_of_a_core": round(cpu_pct, 1) if cpu_pct is not None else None,
        "memscope_rss_mib_first": round(rss[0] / 2**20, 1),
        "memscope_rss_mib_last": round(rss[-1] / 2**20, 1),
        "memscope_rss_growth_bytes_per_birth": round(
            (rss[-1] - rss[0]) / max(1, (births or 1) * (steady[-1][0] - steady[0][0]) / seconds)
        )
        if len(steady) >= 2
        else None,
        "memscope_rss_mib_every_5s": [round(pt[2] / 2**20, 1) for pt in points[::5]],
        "processes_in_summary": len(s.get("processes", [])),
        "exit": s["exit"]["cause"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", type=float, nargs="+", default=[10, 50, 200])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="one rate (50/s) for 6 s: the smoke run")
    a = ap.parse_args()
    if a.quick:
        a.rates, a.seconds = [50], 6
    rows = [measure(r, a.seconds) for r in a.rates]
    for r in rows:
        print(json.dumps(r))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
