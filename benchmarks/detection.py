"""Accuracy benchmark for memscope.analysis.leak on synthetic memory traces.

    python benchmarks/detection.py [--seeds N] [--out FILE]

Each scenario is generated with a seeded ``random.Random`` (seeds 0..N-1) and
assessed on prefixes every 5 s. Columns (aggregated over seeds):

* verdict: verdict on the whole run, as "verdict xK/N" (K of N seeds).
* slope error %: worst |error| of the whole-run slope vs. the true leak rate (leak
  scenarios); for no-leak scenarios the largest estimated slope in KB/s instead.
* time to verdict s: worst (over seeds) smallest prefix from which the verdict stays
  equal to the truth for every later prefix ("-" if it never settles).
* false leak prefixes: prefixes called "leak" in a no-leak scenario, over all seeds.

A timing line for a 24 h, 10 Hz trace (864,000 points) follows the table.

With ``--real``, a second table: real runs under ``memscope.run`` with its default intervals (RSS every 0.2 s,
PSS every 2 s or slower), each on a quiet machine and with both cores kept busy by two spinning processes:
tests/scripts/leak_spikes.py (numpy allocations with a known leak rate and spikes), and real frameworks
(Lightning, the Hugging Face Trainer; tiny models, 2 DataLoader workers, with and without validation outputs
kept). Columns: the summary's verdict, its slope error against the script's own truth, spikes found with their
height within 35 % (leak_spikes only), the first time a verdict came (the summary's method on the record's
prefixes, every 1 s), and the time from which it stayed right.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from bisect import bisect_right
from typing import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from memscope.analysis.leak import assess_leak  # noqa: E402

MB = 1_000_000
KB = 1_000


def _trace(
    rng: random.Random,
    duration_s: float,
    hz: float,
    base: float,
    drift: Callable[[float], float],
    noise: float,
    spikes: list[tuple[float, float, float]] = (),
    extra: Callable[[float], float] | None = None,
) -> tuple[list[float], list[float]]:
    """base + drift(t) + spikes (start, dur, height, with short ramps) + Gaussian noise."""
    n = int(duration_s * hz) + 1
    t = [i / hz for i in range(n)]
    y = [base + drift(x) + rng.gauss(0.0, noise) for x in t]
    if extra is not None:
        y = [v + extra(x) for v, x in zip(y, t)]
    for s, d, h in spikes:
        for i in range(max(0, int(s * hz)), min(n, int(math.ceil((s + d) * hz)))):
            x = t[i]
            ramp = min(1.0, (x - s) / 0.5, (s + d - x) / 0.5)  # 0.5 s ramps, like real allocs
            y[i] += h * max(0.0, ramp)
    return t, y


def periodic_spikes(duration, period, dur, height, offset=10.0):
    return [(s, dur, height) for s in _arange(offset, duration, period)]


def jittered_spikes(rng, duration, period, jitter, dur_range, height_range):
    out, s = [], rng.uniform(0, period)
    while s < duration:
        out.append((s, rng.uniform(*dur_range), rng.uniform(*height_range)))
        s += period + rng.uniform(-jitter, jitter)
    return out


def _arange(a, b, step):
    x = a
    while x < b:
        yield x
        x += step


# Each scenario: name -> (truth, true slope B/s, factory(rng) -> (t, y, phases))
def scenarios():
    def leak_spikes(duration):
        def make(rng):
            t, y = _trace(
                rng,
                duration,
                5,
                500 * MB,
                lambda x: 1 * MB * x,
                2 * MB,
                periodic_spikes(duration, 20, 5, 300 * MB, offset=rng.uniform(0, 20)),
            )
            return t, y, ()

        return make

    def big_spikes_no_leak(rng):
        d = 600
        sp = jittered_spikes(rng, d, 20, 8, (3, 8), (500 * MB, 1500 * MB))
        t, y = _trace(rng, d, 5, 500 * MB, lambda x: 0.0, 3 * MB, sp)
        return t, y, ()

    def flat_noisy(rng):
        t, y = _trace(rng, 600, 5, 800 * MB, lambda x: 0.0, 5 * MB)
        return t, y, ()

    def slow_leak(rng):
        t, y = _trace(rng, 600, 5, 1000 * MB, lambda x: 100 * KB * x, 1 * MB)
        return t, y, ()

    def step(rng):
        t, y = _trace(rng, 600, 5, 600 * MB, lambda x: 500 * MB if x >= 120 else 0.0, 2 * MB)
        return t, y, ()

    def sawtooth(period, amp, leak):
        def make(rng):
            ph = rng.uniform(0, period)
            t, y = _trace(
                rng, 600, 5, 1000 * MB, lambda x: leak * x, 2 * MB, extra=lambda x: amp * (((x + ph) % period) / period)
            )
            return t, y, ()

        return make

    def validation(leak):
        def make(rng):
            d, phases = 900, []
            for s in _arange(0, 900, 60):
                phases += [("train", s, s + 50), ("validation", s + 50, s + 60)]
            val = lambda x: 400 * MB if (x % 60) >= 50 else 0.0  # noqa: E731
            t, y = _trace(rng, d, 5, 2000 * MB, lambda x: leak * x, 3 * MB, extra=val)
            return t, y, tuple(phases)

        return make

    return [
        ("leak 1 MB/s + 300 MB spikes 5s/20s (60 s)", "leak", 1 * MB, leak_spikes(60)),
        ("leak 1 MB/s + 300 MB spikes 5s/20s (300 s)", "leak", 1 * MB, leak_spikes(300)),
        ("no leak, 0.5-1.5 GB jittered spikes (10 min)", "no_leak", 0.0, big_spikes_no_leak),
        ("flat noisy (10 min)", "no_leak", 0.0, flat_noisy),
        ("slow leak 100 KB/s, no spikes (10 min)", "leak", 100 * KB, slow_leak),
        ("step +500 MB at 120 s then flat (10 min)", "no_leak", 0.0, step),
        ("GC sawtooth 200 MB / 30 s (10 min)", "no_leak", 0.0, sawtooth(30, 200 * MB, 0.0)),
        ("leak 0.5 MB/s under GC sawtooth (10 min)", "leak", 0.5 * MB, sawtooth(30, 200 * MB, 0.5 * MB)),
        ("validation +400 MB, phases given, no leak (15 min)", "no_leak", 0.0, validation(0.0)),
        ("validation +400 MB, phases given, leak 0.2 MB/s (15 min)", "leak", 0.2 * MB, validation(0.2 * MB)),
    ]


def evaluate(truth, true_slope, make, seeds, step_s=5.0):
    verdicts, errors, settle, false_leaks, total_prefixes = [], [], [], 0, 0
    for seed in range(seeds):
        t, y, phases = make(random.Random(seed))
        prefix_verdicts = []
        end = step_s
        while True:
            k = bisect_right(t, end)
            tt, yy = t[:k], y[:k]
            v = assess_leak(tt, yy, phases=phases)
            prefix_verdicts.append((min(end, t[-1]), v.verdict))
            if end > t[-1]:
                break
            end += step_s
        total_prefixes += len(prefix_verdicts)
        if truth == "no_leak":
            false_leaks += sum(1 for _, vv in prefix_verdicts if vv == "leak")
        final = assess_leak(t, y, phases=phases)
        verdicts.append(final.verdict)
        if final.slope_bytes_per_s is not None:
            if true_slope:
                errors.append(100.0 * (final.slope_bytes_per_s - true_slope) / true_slope)
            else:
                errors.append(final.slope_bytes_per_s / KB)
        settled = None
        for x, vv in reversed(prefix_verdicts):
            if vv != truth:
                break
            settled = x
        settle.append(settled)
    return verdicts, errors, settle, false_leaks, total_prefixes


def timing(repeats=3):
    rng = random.Random(1)
    n = 864_000
    t = [i / 10 for i in range(n)]
    y = [500 * MB + 10 * KB * x + rng.gauss(0, 2 * MB) + (300 * MB if (x % 20) < 5 else 0) for x in t]
    best = float("inf")
    for _ in range(repeats):
        s = time.perf_counter()
        v = assess_leak(t, y)
        best = min(best, time.perf_counter() - s)
    return best, v


SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "scripts")
MIB = 1 << 20
REAL = [
    # name, script args, truth, module that must import
    ("1.5 MiB per 0.1 s under 250 MiB spikes every 2.3 s", ["leak_spikes.py", "--seconds", "25"], "leak", None),
    ("250 MiB spikes every 2.3 s, no leak", ["leak_spikes.py", "--seconds", "25", "--keep-mib", "0"], "no_leak", None),
    (
        "0.2 MiB per 0.1 s under 100 MiB spikes every 4 s",
        ["leak_spikes.py", "--seconds", "30", "--keep-mib", "0.2", "--spike-mib", "100", "--period", "4"],
        "leak",
        None,
    ),
    (
        "150 MiB spikes every 1.1 s (near the PSS period), no leak",
        [
            "leak_spikes.py",
            "--seconds",
            "25",
            "--keep-mib",
            "0",
            "--spike-mib",
            "150",
            "--period",
            "1.1",
            "--spike-s",
            "0.3",
        ],
        "no_leak",
        None,
    ),
    (
        "Lightning, 2 workers, validation outputs kept",
        ["lightning_train.py", "--seconds", "25", "--leak"],
        "leak",
        "lightning",
    ),
    ("Lightning, 2 workers, no leak", ["lightning_train.py", "--seconds", "25"], "no_leak", "lightning"),
    (
        "HF Trainer, 2 workers, eval outputs kept",
        ["hf_trainer.py", "--seconds", "25", "--leak"],
        "leak",
        "transformers",
    ),
    ("HF Trainer, 2 workers, no leak", ["hf_trainer.py", "--seconds", "25"], "no_leak", "transformers"),
    # Clean runs whose tree holds more processes at times: each evaluation's loader starts 2 workers beside the
    # training's (issue 23: a busy 150 s Trainer run was called "a slow leak, 20 MiB/min").
    (
        "HF Trainer, eval every 25 steps (its loader's 2 workers beside the training's), 150 s, no leak",
        ["hf_trainer.py", "--seconds", "150", "--eval-steps", "25"],
        "no_leak",
        "transformers",
    ),
    (
        "Lightning, validation loader's 2 workers start at each validation, 40 s, no leak",
        ["lightning_train.py", "--seconds", "40", "--eval-loaders"],
        "no_leak",
        "lightning",
    ),
    (
        "a new validation loader (2 workers, 12 MiB each) every 4 s, no leak",
        ["more_loaders.py", "--seconds", "24"],
        "no_leak",
        "torch",
    ),
]


def _busy(on: bool):
    import subprocess

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 if on else 0)]


def _prefix_times(record: str, truth: str) -> tuple[float | None, float | None]:
    """(first verdict, settled on the truth) in seconds of the run, from the record's prefixes every 1 s, fitted
    as the summary and the live line fit (fast private series, train/eval phases, from the training's start, the
    tree reconciled with its processes: leak.run_verdict)."""
    from memscope.analysis.leak import fit_plan, run_verdict
    from memscope.analysis.summary import main_pid
    from memscope.record.reader import RunData

    rd = RunData(record)
    try:
        rows = rd.fast_totals(private=True)
        main = main_pid(rd.processes(), rd.run_row()["root_pid"])
        events = sorted(rd.events("epoch") + rd.events("phase"), key=lambda e: e["t"])
        own = rd.role_fast_totals(column="private").get("main")
        procs = rd.process_fast_floors(0.2)
    finally:
        rd.close()
    t, y = [r[0] for r in rows], [r[1] or 0 for r in rows]

    def cut(ts, ys, end):
        k = bisect_right(ts, end)
        return ts[:k], ys[:k]

    first, verdicts, end = None, [], 1.0
    while t and end <= t[-1] + 1:
        plan = fit_plan([e for e in events if e["t"] <= end], end, main)
        parts = {p: (r, *cut(pt, py, end)) for p, (r, pt, py) in procs.items()}
        v = run_verdict(plan, cut(t, y, end), cut(*own, end) if own else None, parts)[0].verdict
        if first is None and v != "insufficient_data":
            first = end
        verdicts.append((end, v))
        end += 1.0
    settled = None
    for x, v in reversed(verdicts):
        if v != truth:
            break
        settled = x
    return first, settled


def real_runs(quick: bool) -> list[str]:
    import importlib.util
    import re
    import tempfile

    import memscope

    lines = [
        "| real run | machine | truth | verdict | slope error % | spikes found | first verdict s | right from s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    todo = REAL[:1] if quick else REAL
    for name, args, truth, module in todo:
        if module and importlib.util.find_spec(module) is None:
            lines.append(f"| {name} | - | {truth} | not run: {module} is not installed | | | | |")
            continue
        for busy in (False,) if quick else (False, True):
            spinners = _busy(busy)
            try:
                with tempfile.TemporaryDirectory() as d:
                    run = memscope.run([os.path.join(SCRIPTS, args[0]), *args[1:]], record_dir=d, output="capture")
                    s = run.wait(600)
                    line = next((x for x in run.output_tail if x.startswith("TRUTH")), "")
                    tr = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}
                    first, settled = _prefix_times(s["record"], truth)
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
            leak = s["leak"]
            rate = tr.get("rate_bytes_per_s") or (tr.get("kept", 0) * 4 * MIB / tr["fit_s"] if tr.get("fit_s") else 0)
            err = (
                f"{100 * (leak['slope_bytes_per_s'] / rate - 1):+.0f}"
                if truth == "leak" and rate and leak.get("slope_bytes_per_s")
                else "-"
            )
            if "spikes" in tr:
                good = [sp for sp in s["spikes"] if abs(sp["height_bytes"] / tr["spike_bytes"] - 1) <= 0.35]
                spikes = f"{len(good)}/{tr['spikes']:.0f}"
            else:
                spikes = "-"
            lines.append(
                f"| {name} | {'busy' if busy else 'quiet'} | {truth} | {leak['verdict']} | {err} | {spikes} | "
                f"{'-' if first is None else f'{first:.0f}'} | {'-' if settled is None else f'{settled:.0f}'} |"
            )
            print(lines[-1], flush=True)
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", help="also write the Markdown table to this file")
    ap.add_argument("--real", action="store_true", help="also real runs under memscope, quiet and busy")
    ap.add_argument("--quick", action="store_true", help="with --real: one real run, quiet only")
    args = ap.parse_args(argv)

    lines = [
        "| scenario | truth | verdict | slope error % | time to verdict s | false leak prefixes |",
        "|---|---|---|---|---|---|",
    ]
    for name, truth, true_slope, make in scenarios():
        verdicts, errors, settle, false_leaks, total = evaluate(truth, true_slope, make, args.seeds)
        common = max(set(verdicts), key=verdicts.count)
        vtxt = f"{common} {verdicts.count(common)}/{len(verdicts)}"
        if not errors:
            etxt = "-"
        elif true_slope:
            etxt = f"{max(errors, key=abs):+.1f}"
        else:
            etxt = f"n/a (max {max(errors, key=abs):+.1f} KB/s)"
        ttxt = "-" if any(s is None for s in settle) else f"{max(settle):.0f}"
        ftxt = f"{false_leaks}/{total}" if truth == "no_leak" else "-"
        lines.append(f"| {name} | {truth} | {vtxt} | {etxt} | {ttxt} | {ftxt} |")

    secs, v = timing()
    lines += [
        "",
        f"assess_leak on 864,000 points (24 h at 10 Hz): {secs * 1000:.0f} ms "
        f"(verdict {v.verdict}, slope {v.slope_bytes_per_s / KB:.2f} KB/s, truth 10 KB/s)",
    ]
    if args.real:
        lines += ["", *real_runs(args.quick)]
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
