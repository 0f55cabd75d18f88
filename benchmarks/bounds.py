"""memscope's own bounds under a hostile or chatty run (issue 22 #6, #10): memory, record size, loop cost.

    python benchmarks/bounds.py [--json] [--only output,marks,phases] [--src DIR]

Each case runs a child under ``memscope.run`` in this process (capture mode, default options) and reads this
process's RSS (memscope's own memory: collector, recorder, readers) every 0.1 s from /proc/self/status:

- ``output``: the child writes ``--output-mb`` MiB to stdout as fast as it can. Figures: this process's peak RSS
  while the run goes and in the 10 s after ``wait()`` returned, the record's size, what the summary says was
  dropped, and what is left beside the record (the ``.stdout`` capture file).
- ``marks``: the child sends 150 KB marks through its agent's channel for ``--seconds`` s (what memscope.mark
  would send without its own 500-character cut, or any process holding the run's token). Figures: peak RSS,
  record size, marks recorded.
- ``phases``: a loop of small steps (about 10 µs) with ``memscope.phase("step")`` around each and the same loop
  without it, in turns of 0.25 s for ``--seconds`` s (same run, same process). Figures: the loop's slowdown, peak
  RSS, the phase events recorded.

``--src DIR``: import memscope from DIR instead of this checkout (to measure another version the same way).
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

OUTPUT_CHILD = r"""
import os, sys
n = int(sys.argv[1]) << 20
line = (b"x" * 1023) + b"\n"
block = line * 1024  # 1 MiB
w = 0
while w < n:
    w += os.write(1, block)
os.write(2, b"wrote %d\n" % w)
"""

MARKS_CHILD = r"""
import sys, time
agent = sys.modules.get("_memscope_agent")
text = "m" * 150_000
end = time.monotonic() + float(sys.argv[1])
sent = tried = 0
while time.monotonic() < end:
    tried += 1
    sent += bool(agent.phases.send("mark", text=text))
print("marks tried", tried, "sent", sent, flush=True)
"""

PHASES_CHILD = r"""
import sys, time
import memscope
total = float(sys.argv[1])
def step(acc):
    for i in range(200):
        acc += i * i
    return acc
def loop(use, seconds):
    n, acc, end = 0, 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        if use:
            with memscope.phase("step"):
                acc = step(acc)
        else:
            acc = step(acc)
        n += 1
    return n
# In turns of 0.25 s, so that a neighbour's load on a shared machine weighs on both alike.
bare = phased = 0
for _ in range(int(total / 0.5)):
    bare += loop(False, 0.25)
    phased += loop(True, 0.25)
print("steps", bare, phased, flush=True)
"""


class RssWatch:
    """This process's RSS, every 0.1 s, on a thread: peak while watching, and its value at each mark."""

    def __init__(self) -> None:
        self.peak = 0
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._phase = "run"
        self._th = threading.Thread(target=self._loop, daemon=True)
        self._th.start()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            r = self.rss()
            self.peaks[self._phase] = max(self.peaks.get(self._phase, 0), r)

    def phase(self, name: str) -> None:
        self._phase = name

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._th.join()
        return self.peaks


def _files(d: str) -> dict[str, int]:
    out = {}
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            out[name.split(".", 1)[1] if "." in name else name] = os.path.getsize(p)
    return out


def _run(code: str, args: list[str], after_s: float = 0.0) -> dict:
    import memscope
    from memscope.record.reader import RunData

    tmp = tempfile.mkdtemp(prefix="memscope-bench-bounds-")
    try:
        watch = RssWatch()
        base = watch.rss()
        t0 = time.monotonic()
        run = memscope.run([sys.executable, "-c", code, *args], record_dir=tmp, output="capture")
        s = run.wait()
        wall = time.monotonic() - t0
        watch.phase("after")
        time.sleep(after_s)
        peaks = watch.stop()
        files = _files(tmp)
        rd = RunData(s["record"])
        try:
            kinds = {k: len(rd.events(k)) for k in ("mark", "phase", "output")}
        finally:
            rd.close()
        return {
            "rss_before_mib": round(base / 2**20, 1),
            "rss_peak_run_mib": round(peaks.get("run", 0) / 2**20, 1),
            "rss_peak_after_mib": round(peaks.get("after", 0) / 2**20, 1),
            "wall_s": round(wall, 2),
            "files_bytes": files,
            "events": kinds,
            "tail": [x[:160] for x in list(run.output_tail)[-3:]],
            "warnings": [w for w in s.get("warnings") or [] if "memscope" in w or "budget" in w],
            "record_errors": s.get("record_errors"),
            "bounded": s.get("bounded"),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_output(mb: int) -> dict:
    return _run(OUTPUT_CHILD, [str(mb)], after_s=10.0)


def bench_marks(seconds: float) -> dict:
    return _run(MARKS_CHILD, [str(seconds)])


def bench_phases(seconds: float) -> dict:
    r = _run(PHASES_CHILD, [str(seconds)])
    line = next((x for x in r["tail"] if x.startswith("steps")), None)
    if line:
        bare, phased = (int(v) for v in line.split()[1:3])
        r["steps_per_s_bare"] = round(bare / (seconds / 2))
        r["steps_per_s_phased"] = round(phased / (seconds / 2))
        r["slowdown_pct"] = round(100 * (1 - phased / bare), 1)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", default="output,marks,phases")
    ap.add_argument("--src", default=REPO, help="import memscope from this directory")
    ap.add_argument("--output-mb", type=int, default=2048)
    ap.add_argument("--seconds", type=float, default=15.0)
    ns = ap.parse_args()
    sys.path.insert(0, os.path.abspath(ns.src))
    os.environ["PYTHONPATH"] = os.pathsep.join([os.path.abspath(ns.src), os.environ.get("PYTHONPATH", "")])
    import memscope

    out: dict = {"memscope": os.path.dirname(memscope.__file__)}
    only = ns.only.split(",")
    if "output" in only:
        out["output"] = bench_output(ns.output_mb)
    if "marks" in only:
        out["marks"] = bench_marks(ns.seconds)
    if "phases" in only:
        out["phases"] = bench_phases(ns.seconds)
    if ns.json:
        print(json.dumps(out, indent=2))
        return
    print(f"memscope from {out['memscope']}")
    for case in ("output", "marks", "phases"):
        r = out.get(case)
        if r is None:
            continue
        files = ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sorted(r["files_bytes"].items()))
        line = (
            f"{case}: memscope's RSS {r['rss_before_mib']} -> peak {r['rss_peak_run_mib']} MiB during the run"
            + (f", {r['rss_peak_after_mib']} MiB in the 10 s after it" if case == "output" else "")
            + f"; files left: {files}; events {r['events']}; {r['wall_s']} s"
        )
        print(line)
        if case == "phases" and "slowdown_pct" in r:
            print(
                f"phases: {r['steps_per_s_bare']} steps/s bare, {r['steps_per_s_phased']} with memscope.phase: "
                f"{r['slowdown_pct']} % slower"
            )
        for w in r["warnings"]:
            print(f"  warning: {w}")
        if r.get("bounded"):
            print(f"  bounded: {r['bounded']}")


if __name__ == "__main__":
    main()
