"""How long a tensor census stalls a training loop, in a process holding a million live Python objects.

A CPU torch loop records the time of every step; memscope takes censuses of it while it runs. Reported: the
census's own duration (in the agent), and the training's longest step during a census against its median step
(the stall the training feels). The issue's bound: under a second for a million objects.

    python benchmarks/census.py [--objects 1000000] [--censuses 5] [--quick]
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
sys.path.insert(0, HERE)

TRAIN = r"""
import json, sys, time
import torch
n_objects = int(sys.argv[1]); out = sys.argv[2]; seconds = float(sys.argv[3])
junk = [[i] for i in range(n_objects)]           # a million gc-tracked objects, like a big dataset index
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
stamps = []
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    x = torch.randn(64, 256)
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    stamps.append(time.time())
json.dump(stamps, open(out, "w"))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--censuses", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 100k objects, 2 censuses")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    if a.quick:
        a.objects, a.censuses = 100_000, 2
    import memscope

    tmp = tempfile.mkdtemp(prefix="memscope-census-bench-")
    script = os.path.join(tmp, "train.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    stamps_path = os.path.join(tmp, "stamps.json")
    seconds = 6 + 3 * a.censuses
    run = memscope.run(
        [script, str(a.objects), stamps_path, str(seconds)], output="capture", record_dir=os.path.join(tmp, "runs")
    )
    while not any("ready" in line for line in list(run.output_tail)):
        time.sleep(0.1)
    time.sleep(2.0)
    windows = []
    durations = []
    for _ in range(a.censuses):
        t0 = time.time()
        c = run.census()
        windows.append((t0, time.time()))
        durations.append(c.duration_s)
        objects = c.objects
        time.sleep(2.0)
    run.wait(seconds + 60)
    with open(stamps_path) as f:
        stamps = json.load(f)
    steps = [(b, b - a_) for a_, b in zip(stamps, stamps[1:])]
    median = statistics.median(d for _, d in steps)
    during = [max((d for t, d in steps if w0 <= t <= w1 + median * 3), default=0.0) for w0, w1 in windows]
    result = {
        "objects": objects,
        "censuses": a.censuses,
        "census_s_median": statistics.median(durations),
        "census_s_max": max(durations),
        "median_step_s": median,
        "longest_step_during_census_s": max(during),
        "stall_s": max(during) - median,
    }
    print(
        f"census of {objects:,} objects: {result['census_s_median']:.3f} s median, {result['census_s_max']:.3f} s "
        f"max (in the agent); the training's median step {median * 1000:.1f} ms, its longest step during a "
        f"census {max(during) * 1000:.0f} ms (stall {result['stall_s'] * 1000:.0f} ms)"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
