"""Where memscope's own CPU goes while it watches a run: CPU time per collector thread.

    python benchmarks/collector_cpu.py [--json] [-- train_loop.py args]

Runs ``benchmarks/train_loop.py`` under ``memscope.Run`` (default options, agent on) in this process, and reads
every thread's CPU time from /proc/self/task/<tid>/schedstat (nanoseconds on the CPU, user + system) every 0.1 s
until the run has ended; a thread's figure is its last reading (threads that end between two readings lose at
most 0.1 s of theirs). The main thread's figure covers memscope's imports and ``Run.start``; the waiter's covers
the summary at the end. The record tells how many rounds of each kind were made, hence the cost per round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def thread_cpu(tid: int) -> float | None:
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def measure(loop_args: list[str]) -> dict:
    t_imp = time.perf_counter()
    c_imp = thread_cpu(threading.get_native_id()) or 0.0
    from memscope.record.reader import RunData
    from memscope.session.options import Options
    from memscope.session.run import Run

    imports_cpu = (thread_cpu(threading.get_native_id()) or 0.0) - c_imp
    imports_wall = time.perf_counter() - t_imp
    tmp = tempfile.mkdtemp(prefix="memscope-bench-cpu-")
    try:
        main_tid = threading.get_native_id()
        c0 = thread_cpu(main_tid) or 0.0
        run = Run(
            [os.path.join(REPO, "benchmarks", "train_loop.py"), *loop_args],
            options=Options(record_dir=tmp, output="capture"),
        ).start()
        start_cpu = (thread_cpu(main_tid) or 0.0) - c0
        last: dict[tuple[str, int], float] = {}
        while True:
            ended = run.ended
            for th in threading.enumerate():
                if th is threading.main_thread() or not th.native_id:
                    continue
                c = thread_cpu(th.native_id)
                if c is not None:
                    last[(th.name, th.native_id)] = c
            if ended:
                break
            time.sleep(0.1)
        summary = run.wait() or {}
        by_name: dict[str, float] = {}
        for (name, _), c in last.items():
            by_name[name] = by_name.get(name, 0.0) + c
        rd = RunData(run.record_path)
        try:
            con = rd.con
            rounds = {
                kind: con.execute("SELECT COUNT(DISTINCT t) FROM samples WHERE kind=?", (k,)).fetchone()[0]
                for kind, k in (("rss", 0), ("pss", 1))
            }
            rounds["host"] = con.execute("SELECT COUNT(*) FROM host").fetchone()[0]
            rounds["events"] = con.execute("SELECT COUNT(*) FROM events").fetchone()[0]
            rounds["processes"] = con.execute("SELECT COUNT(*) FROM processes").fetchone()[0]
        finally:
            rd.close()
        return {
            "duration_s": summary.get("duration_s"),
            "threads": by_name,
            "rounds": rounds,
            "imports_cpu_s": imports_cpu,
            "imports_wall_s": imports_wall,
            "start_cpu_s": start_cpu,
            "cause": (summary.get("exit") or {}).get("cause"),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def table(d: dict) -> str:
    dur = d["duration_s"] or 1.0
    r = d["rounds"]
    per = {
        "memscope-pss": ("PSS round (smaps_rollup of every process)", r.get("pss")),
        "memscope-rss": ("RSS round + discovery every 0.5 s + host sample every 1 s", r.get("rss")),
        "memscope-recorder": ("SQLite inserts, a commit (fsync) every 0.5 s", None),
        "memscope-agent-server": ("agents' messages", None),
        "memscope-waiter": ("wait4, then the summary at the end", None),
        "memscope-stdout": ("the program's output (captured)", None),
        "memscope-stderr": ("the program's output (captured)", None),
    }
    lines = [
        "| memscope thread | does | CPU (s) | % of one core over the run | rounds | ms CPU per round |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, cpu in sorted(d["threads"].items(), key=lambda x: -x[1]):
        what, n = per.get(name, ("", None))
        lines.append(
            f"| {name} | {what} | {cpu:.3f} | {100 * cpu / dur:.2f} % | {n if n else ''} | "
            f"{f'{1e3 * cpu / n:.2f}' if n else ''} |"
        )
    steady = sum(c for n, c in d["threads"].items() if n != "memscope-waiter")
    lines.append(
        f"| (main thread) | memscope's imports ({d['imports_wall_s']:.2f} s wall) and Run.start | "
        f"{d['imports_cpu_s'] + d['start_cpu_s']:.3f} | | | |"
    )
    lines.append(f"| **all threads while the run goes** | | **{steady:.3f}** | **{100 * steady / dur:.2f} %** | | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    ap.add_argument("loop_args", nargs="*", help="train_loop.py's arguments (after --)")
    ns = ap.parse_args()
    d = measure(ns.loop_args)
    print(json.dumps(d) if ns.json else table(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
