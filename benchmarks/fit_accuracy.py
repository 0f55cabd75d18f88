"""How right is ``memscope fit``? Forecast, then really run the target, on three CPU trainings of our own.

    python benchmarks/fit_accuracy.py                 # cnn, lm, loader (~8 min on the 2-core VM under load)
    python benchmarks/fit_accuracy.py --quick         # cnn only, smaller sizes: a CI smoke test (~2 min)
    python benchmarks/fit_accuracy.py --out FILE      # also write the Markdown report to FILE
    python benchmarks/fit_accuracy.py --heldout       # bert, resnet, lstm: written after fit was tuned

For each workload (``fit_workloads.py``: a CNN, a Transformer LM, a DataLoader with 3 workers; synthetic data):
the probes run as ``memscope fit`` runs them (default length: one evaluation and the training after it, at most
20 s of training; glibc's mmap threshold fixed, then the anchor at the largest size with the program's own
settings), the forecast at the target is taken, then the target runs to its own end under memscope and its
peak (the summary's: the tree's PSS at the fast rate) is the truth. Reported: the forecast's error, whether
``fits`` agrees with the real run under two limits near the boundary (the real peak 8 % inside, and 8 % outside,
``limit x (1 - margin)``), how long the probes took against the real run, and when the real run reached its peak
(seconds after its training began: what the default probe length has to cover).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import memscope  # noqa: E402
from memscope.analysis import fit as F  # noqa: E402
from memscope.fmt import fmt_bytes  # noqa: E402
from memscope.session.fit import Fit  # noqa: E402

WORKLOAD = os.path.join(HERE, "fit_workloads.py")
HELDOUT_WORKLOAD = os.path.join(HERE, "fit_workloads_heldout.py")
MARGIN = 0.1
TARGET_ERROR = 0.10

# name (fit_workloads.py's model, then an optional "-label"), sizes, target, extra arguments, what it is
CASES = [
    ("cnn", [8, 16, 32], 64, ["--steps", "30", "--eval-every", "10"], "CNN, 4 conv blocks, 3x64x64, SGD"),
    (
        "lm",
        [4, 8, 16],
        32,
        ["--steps", "10", "--eval-every", "5"],
        "Transformer LM, 2 layers, d 128, 128 tokens, AdamW",
    ),
    ("lm-near", [8, 16, 24], 32, ["--steps", "10", "--eval-every", "5"], "the same LM, probed nearer the target"),
    (
        "loader",
        [16, 32, 64],
        128,
        ["--steps", "30", "--eval-every", "10", "--workers", "3", "--image", "128"],
        "MLP fed by a DataLoader, 3 workers, prefetch 4, per-sample augmentation, 3x128x128",
    ),
]
# Written after fit was tuned on CASES, and its forecast not changed on them: how it does on programs it has not
# seen (sizes and targets chosen before their first run, like CASES': probes up to a half of the target). The high
# side (predicted_peak_high_bytes) was added after their first 12 runs: it is in-sample for them.
HELDOUT = [
    (
        "bert",
        [4, 8, 16],
        32,
        ["--steps", "30", "--eval-every", "10"],
        "BERT, 4 layers, 256 wide, 128 tokens, HF Trainer",
    ),
    ("resnet", [16, 32, 64], 128, ["--steps", "30", "--eval-every", "10"], "ResNet, basic blocks, 3x32x32, Adam"),
    (
        "lstm",
        [8, 16, 32],
        64,
        ["--steps", "30", "--eval-every", "10"],
        "2-layer LSTM LM, vocabulary 8000, 64 tokens, Adam",
    ),
]
QUICK = [("cnn", [4, 8, 16], 32, ["--steps", "12", "--eval-every", "4"], "CNN (quick)")]


def one(name: str, sizes: list[int], target: int, extra: list[str], record_dir: str) -> dict:
    model = name.split("-")[0]
    script = HELDOUT_WORKLOAD if model in {c[0] for c in HELDOUT} else WORKLOAD
    cmd = [sys.executable, script, model, "--batch", "{}", *extra]
    t0 = time.monotonic()
    fit = Fit(cmd, sizes, target=target, margin=MARGIN, record_dir=record_dir)
    result = fit.run()
    probes_s = time.monotonic() - t0
    t0 = time.monotonic()
    run = memscope.run(
        [sys.executable, script, model, "--batch", str(target), *extra],
        record_dir=record_dir,
        output="capture",
        interval_s=0.05,  # the truth at the probes' rate
    )
    s = run.wait()
    real_s = time.monotonic() - t0
    assert s is not None and s["exit"]["cause"] == "ok", (s or {}).get("exit")
    measured = int(s["peak"]["tree_pss_bytes"])
    from memscope.record.reader import RunData

    rd = RunData(s["record"])
    try:
        maxrss = next(iter(rd.events("exit_status")))["data"].get("maxrss_bytes")
        fast = rd.fast_totals()
    finally:
        rd.close()
    phases = [p for p in s.get("phases") or [] if p["name"] in ("train", "eval")]
    train_t = phases[0]["start_s"] if phases else 0.0
    # When the real run first came within 2 % (and 5 %) of its peak: what the probes' default length must cover.
    near = {k: next((t for t, v in fast if (v or 0) >= k * measured), None) for k in (0.95, 0.98)}
    pred = result["predicted_peak_bytes"]
    alt = alternatives(fit.points, target)
    agree = []
    for inside in (True, False):
        # The real peak 8 % inside (or outside) the budget limit x (1 - margin).
        limit = int(measured / (1 - MARGIN) * (1.08 if inside else 0.92))
        r = F.forecast(fit.points, target, limit, MARGIN, None)
        agree.append(r["fits"] == inside)
    return {
        "name": name,
        "sizes": sizes,
        "target": target,
        "probe_peaks": [(x["size"], x["peak_bytes"], x.get("anchor")) for x in result["runs"]],
        "retention": (result.get("allocator") or {}).get("retention_bytes"),
        "predicted": pred,
        "measured": measured,
        "error": (pred - measured) / measured,
        "high_error": (result["predicted_peak_high_bytes"] - measured) / measured,
        "alt_errors": {k: (v - measured) / measured for k, v in alt.items()},
        "maxrss": maxrss,
        "on_line": result["model"]["tree"]["on_line"],
        "agree": agree,
        "probes_s": probes_s,
        "real_s": real_s,
        "peak_after_train_s": s["peak"]["at_s"] - train_t,
        "near_s": {k: (t - train_t if t is not None else None) for k, t in near.items()},
        "real_duration_s": s["duration_s"],
        "train_s": s["duration_s"] - train_t,
    }


def alternatives(points: list, target: int) -> dict[str, float]:
    """Other estimators on the same probes, for comparison: the fixed-threshold probes' least-squares line alone
    (without the anchor's retention), and the line through the two largest of them, each on the private peaks plus
    the file-backed part's median as memscope does."""
    alive = sorted((p for p in points if p.died is None and not p.anchor), key=lambda p: p.size)
    if len(alive) < 2 or any(p.peaks.get("tree_private") is None for p in alive):
        return {}
    xs = [p.size for p in alive]
    ys = [p.peaks["tree_private"] for p in alive]
    files = sorted(p.peaks["tree_file"] for p in alive)
    off = files[len(files) // 2]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    secant = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return {"plain": my + b * (target - mx) + off, "two_largest": ys[-1] + secant * (target - xs[-1]) + off}


def _s(v: float | None) -> str:
    return f"{v:.1f} s" if v is not None else "—"


def report(rows: list[dict], cases: list, started: str, load: tuple[str, str]) -> str:
    what = {c[0]: c[4] for c in cases}
    lines = [
        "### memscope fit: forecast against the real run",
        "",
        f"Run {started}; load average before {load[0]}, after {load[1]} (2-core VM shared with other jobs). Peak: "
        "the summary's (the tree's PSS at the fast rate); probes at the default length; margin 10 %.",
        "",
        "| workload | probes (size: peak) | target | forecast | real peak | error | on a line | `fits` agrees "
        "(limit 8 % above / below) | probes took | real run took | real peak reached (within 5 % / 2 % of it / all of it), after training began | "
        "real run's RSS high-water mark (root) | kept by the allocator at the largest probe (anchor - fixed line) | "
        'error of the fixed line alone / of its two largest probes\' line | error of the "up to" forecast (what '
        "the allocator keeps grown with the size) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        probes = ", ".join(f"{s}{' own' if a else ''}: {fmt_bytes(p)}" for s, p, a in r["probe_peaks"])
        agree = " / ".join("yes" if a else "NO" for a in r["agree"])
        lines.append(
            f"| {r['name']} ({what[r['name']]}) | {probes} | {r['target']} | {fmt_bytes(r['predicted'])} | "
            f"{fmt_bytes(r['measured'])} | {r['error']:+.1%} | {r['on_line']} | {agree} | {r['probes_s']:.0f} s | "
            f"{r['real_s']:.0f} s | {_s(r['near_s'][0.95])} / {_s(r['near_s'][0.98])} / {r['peak_after_train_s']:.1f} s of {r['train_s']:.0f} s | "
            f"{fmt_bytes(r['maxrss'])} | {fmt_bytes(r['retention'])} | "
            + " / ".join(
                f"{r['alt_errors'][k]:+.1%}" if k in r["alt_errors"] else "—" for k in ("plain", "two_largest")
            )
            + f" | {r['high_error']:+.1%} |"
        )
    worst = max(abs(r["error"]) for r in rows)
    medians = []
    for name in dict.fromkeys(r["name"] for r in rows):
        errs = sorted(abs(r["error"]) for r in rows if r["name"] == name)
        medians.append(f"{name} {errs[len(errs) // 2]:.1%}")
    lines += [
        "",
        f"Median absolute error per workload: {', '.join(medians)}.",
        f"Largest error: {worst:.1%} (target within {TARGET_ERROR:.0%}: "
        f"{'met' if worst <= TARGET_ERROR else 'NOT met'}); `fits` agreed in "
        f"{sum(sum(r['agree']) for r in rows)} of {2 * len(rows)} cases.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the CNN only, smaller sizes: a CI smoke test")
    ap.add_argument(
        "--heldout", action="store_true", help="the workloads written after fit was tuned (bert resnet lstm)"
    )
    ap.add_argument(
        "--only", nargs="*", help="workloads to run (cnn lm lm-near loader; with --heldout bert resnet lstm)"
    )
    ap.add_argument("--out", metavar="FILE", help="also write the Markdown report here")
    ap.add_argument("--repeat", type=int, default=None, help="runs of each workload (2; 1 with --quick)")
    a = ap.parse_args(argv)
    repeat = a.repeat or (1 if a.quick else 2)
    cases = QUICK if a.quick else [c for c in (HELDOUT if a.heldout else CASES) if not a.only or c[0] in a.only]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = []
    with tempfile.TemporaryDirectory(prefix="memscope-fit-") as d:
        for name, sizes, target, extra, _ in [c for c in cases for _ in range(repeat)]:
            r = one(name, sizes, target, extra, d)
            print(
                f"{name}: forecast {fmt_bytes(r['predicted'])}, real {fmt_bytes(r['measured'])} ({r['error']:+.1%})",
                file=sys.stderr,
            )
            rows.append(r)
    after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    md = report(rows, cases, started, (before, after))
    print(md)
    if a.out:
        with open(a.out, "w") as f:
            f.write(md)
    met = max(abs(r["error"]) for r in rows) <= TARGET_ERROR and all(all(r["agree"]) for r in rows)
    # The smoke run (CI) checks that the probes, the forecast and the real run work, not one run's accuracy: the
    # same command's peak varies by up to 15 % between runs on a loaded machine, so one miss is no failure.
    return 0 if met or a.quick else 1


if __name__ == "__main__":
    sys.exit(main())
