"""What the Prometheus exporter costs: CPU at a 1 s scrape interval on a 16-process tree.

    python benchmarks/exporter.py [--seconds 60] [--out exporter.md] [--quick]

Starts a 16-process tree (a main process and 15 children, with RANK 0-3 in their environments: 4 ranks x roles)
under ``memscope.Run`` with ``prometheus="127.0.0.1:0"`` in this process, and scrapes its endpoint once a second
over HTTP for the whole run, as Prometheus would. The exporter's cost is the CPU of its own threads: the
subscriber thread that folds records into the latest state (schedstat of the thread), the time spent answering
each scrape (the collector, the leak refit when due, and the text format: thread CPU measured around the WSGI
call), and the listening thread's poll loop (schedstat). The scraping client's own CPU is not the exporter's and
is not counted. Target: < 0.5 % of one core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

from collector_cpu import thread_cpu  # noqa: E402
from hostinfo import emit  # noqa: E402

TREE = r"""
import os, subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c",
                          "import time; b = bytearray(8 << 20); b[::4096] = b'x' * (len(b) // 4096); time.sleep(3600)"],
                         env=dict(os.environ, RANK=str(i % 4))) for i in range(15)]
held = bytearray(32 << 20)
held[::4096] = b"x" * (len(held) // 4096)
time.sleep(float(sys.argv[1]))
for k in kids:
    k.terminate()
for k in kids:
    k.wait()
"""


def measure(seconds: float) -> dict:
    from memscope.session.options import Options
    from memscope.session.run import Run

    tmp = tempfile.mkdtemp(prefix="memscope-bench-exporter-")
    script = os.path.join(tmp, "tree.py")
    with open(script, "w") as f:
        f.write(TREE)
    try:
        run = Run(
            [script, str(seconds)], options=Options(record_dir=tmp, output="capture", prometheus="127.0.0.1:0")
        ).start()
        ex = run.exporter
        scrapes, sizes, lines, procs_seen = 0, [], 0, 0
        last: dict[tuple[str, int], float] = {}
        t0 = time.monotonic()
        next_scrape = t0
        while not run.ended:
            now = time.monotonic()
            if now >= next_scrape:
                try:
                    body = urllib.request.urlopen(ex.url, timeout=5).read()
                    scrapes += 1
                    sizes.append(len(body))
                    text = body.decode()
                    lines = max(lines, sum(1 for ln in text.splitlines() if ln and not ln.startswith("#")))
                    procs_seen = max(
                        procs_seen,
                        int(
                            sum(
                                float(ln.rsplit(" ", 1)[1])
                                for ln in text.splitlines()
                                if ln.startswith("memscope_processes{")
                            )
                        ),
                    )
                except OSError:
                    pass
                next_scrape += 1.0
            for th in threading.enumerate():
                if th.name in ("memscope-subscriber", "memscope-prometheus") and th.native_id:
                    c = thread_cpu(th.native_id)
                    if c is not None:
                        last[(th.name, th.native_id)] = c
            time.sleep(0.1)
        wall = time.monotonic() - t0
        summary = run.wait() or {}
        sub = sum(c for (n, _), c in last.items() if n == "memscope-subscriber")
        loop = sum(c for (n, _), c in last.items() if n == "memscope-prometheus")
        total = sub + ex.scrape_cpu_s + loop
        return {
            "wall_s": wall,
            "duration_s": summary.get("duration_s"),
            "scrapes": scrapes,
            "procs": procs_seen,
            "samples_per_scrape": lines,
            "bytes_per_scrape": max(sizes) if sizes else 0,
            "subscriber_cpu_s": sub,
            "record_cpu_s": ex.record_cpu_s,
            "scrape_cpu_s": ex.scrape_cpu_s,
            "server_loop_cpu_s": loop,
            "total_cpu_s": total,
            "core_percent": 100 * total / wall,
            "ms_per_scrape": 1e3 * ex.scrape_cpu_s / max(1, ex.scrapes),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(d: dict) -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    ok = "met" if d["core_percent"] < 0.5 else "MISSED"
    return (
        "## The Prometheus exporter's cost\n\n"
        f"A {d['procs']}-process tree under `memscope.Run(prometheus=...)` for {d['wall_s']:.0f} s, its endpoint "
        f"scraped over HTTP once a second ({d['scrapes']} scrapes, {d['samples_per_scrape']} samples and "
        f"{d['bytes_per_scrape'] / 1024:.1f} KiB a scrape). Load average after: {load}.\n\n"
        "| exporter part | CPU (s) | % of one core |\n|---|---:|---:|\n"
        f"| subscriber thread: records folded into the latest state (of which in `on_record`: "
        f"{d['record_cpu_s']:.3f} s) | {d['subscriber_cpu_s']:.3f} | {100 * d['subscriber_cpu_s'] / d['wall_s']:.3f} % |\n"
        f"| answering scrapes: collector, leak refits, text format ({d['ms_per_scrape']:.2f} ms a scrape) | "
        f"{d['scrape_cpu_s']:.3f} | {100 * d['scrape_cpu_s'] / d['wall_s']:.3f} % |\n"
        f"| the listening thread's poll loop | {d['server_loop_cpu_s']:.3f} | "
        f"{100 * d['server_loop_cpu_s'] / d['wall_s']:.3f} % |\n"
        f"| **all** | **{d['total_cpu_s']:.3f}** | **{d['core_percent']:.3f} %** |\n\n"
        f"Target: < 0.5 % of one core at a 1 s scrape interval on a 16-process tree: **{ok}**.\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true", help="10 s (a smoke run)")
    ap.add_argument("--out", help="also write the report here")
    ns = ap.parse_args()
    emit(report(measure(10.0 if ns.quick else ns.seconds)), ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
