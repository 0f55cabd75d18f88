"""What stacks ("last words") cost: the training's stall per capture, and request -> the whole tree's stacks.

A CPU torch-free training (pure Python steps of ~1 ms, timed one by one) in a main process with 15 forked workers
waiting in a queue, as DataLoader workers do: 16 Python processes, each with memscope's agent. memscope takes
``--captures`` captures with ``run.stacks()``. Reported: the wall time from the request to every process's stacks
(issue's bound: 1 s for 16 processes) and the capture's own duration; the main's longest step during a capture
against its median step (the stall the training feels; bound: 20 ms); and what the sampling round's watches cost
between captures (nothing runs in the processes between captures: a registered signal handler only).

    python benchmarks/stacks.py [--workers 15] [--captures 10] [--quick] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TRAIN = r"""
import json, multiprocessing as mp, sys, time
workers, out, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])

def worker(q):
    q.get()  # waits, as a DataLoader worker between batches

def step():
    return sum(i * i for i in range(3000))  # ~1 ms of Python

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(q,)) for _ in range(workers)]
    for p in procs:
        p.start()
    stamps = []
    print("ready", flush=True)
    end = time.time() + seconds
    while time.time() < end:
        step()
        stamps.append(time.time())
    for _ in procs:
        q.put(None)
    for p in procs:
        p.join()
    json.dump(stamps, open(out, "w"))
"""


def handler_cost(threads: int = 4, depth: int = 30, n: int = 200) -> float:
    """Milliseconds faulthandler's dump takes inside the process (what a capture takes from it), measured by
    raising the signal synchronously in this process: ``threads`` threads ``depth`` frames deep."""
    import faulthandler
    import signal
    import threading

    sig = int(signal.SIGURG)  # the stacks signal (agent/protocol.py)
    stop = threading.Event()

    def deep(k: int) -> None:
        if k:
            deep(k - 1)
        else:
            stop.wait()

    ts = [threading.Thread(target=deep, args=(depth,), daemon=True) for _ in range(threads - 1)]
    for t in ts:
        t.start()
    fd, path = tempfile.mkstemp(prefix="memscope-stacks-dump-")
    with open(fd, "w") as f:
        faulthandler.register(sig, file=f, all_threads=True, chain=False)
        best = []
        for _ in range(n):
            t0 = time.perf_counter()
            signal.raise_signal(sig)
            best.append(time.perf_counter() - t0)
        faulthandler.unregister(sig)
    stop.set()
    os.unlink(path)
    return statistics.median(best) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--captures", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 3 workers, 3 captures")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    if a.quick:
        a.workers, a.captures = 3, 3
    import memscope

    dump_ms = handler_cost()
    tmp = tempfile.mkdtemp(prefix="memscope-stacks-bench-")
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    stamps_path = os.path.join(tmp, "stamps.json")
    seconds = 6 + 1.5 * a.captures
    run = memscope.run(
        [script, str(a.workers), stamps_path, str(seconds)],
        output="capture",
        record_dir=os.path.join(tmp, "runs"),
        stall_after_s=0,
    )
    while not any("ready" in line for line in list(run.output_tail)):
        time.sleep(0.1)
    n = a.workers + 1
    deadline = time.monotonic() + 30
    while len(run.stack_taker.handlers) < n and time.monotonic() < deadline:
        time.sleep(0.1)  # every agent's hello
    time.sleep(1.0)
    windows, walls, durations, answered = [], [], [], []
    for _ in range(a.captures):
        t0 = time.time()
        s = run.stacks()
        t1 = time.time()
        windows.append((t0, t1))
        walls.append(t1 - t0)
        durations.append(s.data["duration_s"])
        answered.append(sum(1 for p in s.processes if p["status"] == "ok"))
        time.sleep(1.0)
    # The sampling round's watches, between captures: their cost per call on this tree (in memscope, not the run).
    sample = run.tree.rss_round()
    run.options.stall_after_s = 60.0  # both watches on, as by default (the stall watch reads each process's CPU)
    k = 200
    c0 = time.perf_counter()
    for _ in range(k):
        run.stack_taker.after_round(sample)
    watch_ms = (time.perf_counter() - c0) / k * 1000
    run.wait(seconds + 60)
    with open(stamps_path) as f:
        stamps = json.load(f)
    steps = [(b, b - a_) for a_, b in zip(stamps, stamps[1:])]
    median = statistics.median(d for _, d in steps)
    during = [max((d for t, d in steps if w0 <= t <= w1 + 0.05), default=0.0) for w0, w1 in windows]
    outside = sorted(d for t, d in steps if not any(w0 - 0.05 <= t <= w1 + 0.1 for w0, w1 in windows))
    p99 = outside[int(len(outside) * 0.99)] if outside else 0.0
    result = {
        "processes": n,
        "captures": a.captures,
        "answered_min": min(answered),
        "request_to_stacks_s_median": statistics.median(walls),
        "request_to_stacks_s_max": max(walls),
        "capture_duration_s_median": statistics.median(durations),
        "median_step_s": median,
        "p99_step_outside_s": p99,
        "longest_step_during_capture_s": statistics.median(during),
        "longest_step_during_capture_s_max": max(during),
        "stall_s_median": statistics.median(during) - median,
        "watch_ms_per_round": watch_ms,
        "dump_ms_in_process": dump_ms,
    }
    print(f"the dump inside one process (4 threads, 30 frames deep each): {dump_ms:.3f} ms median")
    print(
        f"{n} processes, {a.captures} captures ({min(answered)}+ answered each): request -> every stack "
        f"{result['request_to_stacks_s_median'] * 1000:.0f} ms median, {result['request_to_stacks_s_max'] * 1000:.0f}"
        f" ms max; the main's median step {median * 1000:.2f} ms (p99 outside captures {p99 * 1000:.1f} ms), its "
        f"longest step during a capture {result['longest_step_during_capture_s'] * 1000:.1f} ms median, "
        f"{max(during) * 1000:.1f} ms max (stall {result['stall_s_median'] * 1000:.1f} ms median); the sampling "
        f"round's watches {watch_ms:.3f} ms a round; nothing runs in the processes between captures"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
