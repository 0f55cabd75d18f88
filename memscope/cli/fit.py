"""``memscope fit``: will the target size fit? Short probes at a few sizes, a line per series, the forecast."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any, ClassVar

from ..errors import LaunchError
from ..fmt import fmt_bytes
from .options import _positive, _share, parse_size


def _margin(text: str) -> float:
    v = _share(text)
    if v >= 1:
        raise argparse.ArgumentTypeError(f"a margin is below 100%: {text}")
    return v


def _target(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"the target is a positive whole number: {text}")
    return v


class FitCommand:
    """forecast a training's peak memory at a batch size from short probes at smaller ones ("will batch 64 fit?")

    Each size replaces {} in the command and runs as a recorded memscope run, stopped early; a line per role and
    phase (and GPU) through the probes' peaks gives the forecast at --target and the largest size that fits."""

    name: ClassVar[str] = "fit"
    usage: ClassVar[str | None] = (
        "memscope fit --sizes 8,16,32 [--target 64] [--limit SIZE] [--margin 10%%] [--for S] [--json] -- CMD …{}…"
    )

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """The probe sizes, the target, the limit and margin, how long each probe runs, and the command."""
        parser.add_argument("--sizes", required=True, metavar="A,B,C", help="the probe sizes, at least two: 8,16,32")
        parser.add_argument("--target", type=_target, metavar="N", help="the size to forecast (twice the largest)")
        parser.add_argument(
            "--limit",
            type=parse_size,
            metavar="SIZE",
            help="the memory budget, e.g. 12G; a probe over it is stopped and does not fit (default: the "
            "container's limit, else the host's memory; on a GPU, the device's memory too)",
        )
        parser.add_argument(
            "--margin", type=_margin, default=0.1, metavar="SHARE", help="headroom kept below the limit (10%%)"
        )
        parser.add_argument(
            "--for",
            dest="for_s",
            type=_positive,
            metavar="S",
            help="seconds of training per probe (default: one evaluation and 2 s of training after it, 10 s of "
            "training at least, 20 s at most; 30 s where memscope sees no training phases)",
        )
        parser.add_argument("--record", metavar="DIR", help="where the probes' records go (default ./.memscope/runs)")
        parser.add_argument("--json", action="store_true", help="print the forecast as JSON")
        parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [args] with {} where the size goes")

    def run(self, ns: argparse.Namespace) -> int:
        """Probe, fit, print; 0 when the target fits, 1 when it does not (2: bad input, said in one line)."""
        from .. import supervise
        from ..session.fit import Fit, parse_sizes

        sizes = parse_sizes(ns.sizes)
        out = sys.stderr

        def say(line: str) -> None:
            if not ns.json:
                out.write(line.rstrip("\n") + "\n")

        fit = Fit(
            ns.command,
            sizes,
            target=ns.target,
            limit_bytes=ns.limit,
            margin=ns.margin,
            for_s=ns.for_s,
            record_dir=ns.record,
            say=say,
        )
        supervise.declare_sole_launcher()
        fit.subscribe(lambda kind, data: _progress(kind, data, say))
        presses = {"n": 0}

        def on_signal(signum: int, _frame: object) -> None:
            presses["n"] += 1
            say("memscope: stopping the probe (the forecast uses the probes that finished)")
            fit.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        try:
            result = fit.run()
        except LaunchError as exc:
            sys.stderr.write(f"memscope: {exc}\n")
            return 1
        if ns.json:
            print(json.dumps(result, indent=2))
        else:
            print(table(result))
        return 0 if result["fits"] else 1


def _progress(kind: str, data: dict[str, Any], say: Any) -> None:
    if kind == "probe_started":
        own = " with the program's own allocator settings" if data.get("anchor") else ""
        say(f"memscope fit: probe at size {data['size']}{own}: {data['run'].run_id}")
    elif kind == "probe_done":
        p = data["point"]
        own = " with the program's own allocator settings" if p.anchor else ""
        if p.died == "skipped":
            say(f"memscope fit: probe at size {p.size}{own}: skipped (a smaller size did not fit)")
        else:
            what = f"did not fit ({p.died})" if p.died else f"peak {fmt_bytes(p.peaks.get('tree'))}"
            say(f"memscope fit: probe at size {p.size}{own}: {what}")


def table(r: dict[str, Any]) -> str:
    """The forecast as text: the probes, the model, the forecast and the headroom."""
    alloc = r.get("allocator") or {}
    fixed = alloc.get("mmap_threshold")
    lines = ["Probes", f"  {'size':>8}  {'peak (tree PSS)':>16}  {'allocator':<10} record"]
    for run in r["runs"]:
        if run.get("died") == "skipped":
            peak = "skipped"
        elif run.get("died"):
            peak = f"died: {run['died']}"
        else:
            peak = fmt_bytes(run["peak_bytes"])
        how = "own" if run.get("anchor") or not fixed else "fixed"
        lines.append(f"  {run['size']:>8}  {peak:>16}  {how:<10} {run['record'] or ''}")
    if fixed:
        lines.append(
            f"  fixed: glibc's mmap threshold fixed at {fmt_bytes(fixed)} (the line); own: the program's own settings"
        )
    lines += ["Model (peak = intercept + slope × size)"]
    for name, m in r["model"].items():
        shape = {True: "on a line", False: "NOT on a line", None: "two points"}[m["on_line"]]
        lines.append(
            f"  {name:<24} {fmt_bytes(m['intercept']):>9} + {fmt_bytes(m['slope'], 'tenth'):>9} × size   "
            f"residual {fmt_bytes(m['residual'])}  ({shape})"
        )
    limit, margin = r["limit_bytes"], r["margin"]
    budget = limit * (1 - margin) if limit else None
    pred = r["predicted_peak_bytes"]
    lines.append("Forecast")
    kept = alloc.get("retention_bytes")
    if pred is None:
        lines.append("  no forecast")
    elif kept is not None:
        lines.append(
            f"  at size {r['target']}: {fmt_bytes(pred)} peak (the line, plus {fmt_bytes(kept)} "
            f"the program's own allocator kept above it at size {alloc['anchor_size']})"
        )
    else:
        lines.append(f"  at size {r['target']}: {fmt_bytes(pred)} peak")
    from ..analysis.fit import high_words  # not at import: every command's start-up imports this module

    high = high_words(r)
    if high:
        lines.append(f"  {high}")
    if limit:
        lines.append(f"  limit {fmt_bytes(limit)}, keeping {margin:.0%} free: {fmt_bytes(budget)} to use")
        if pred is not None and budget is not None:
            room = budget - pred
            word = "headroom" if room >= 0 else "over by"
            lines.append(f"  {word} {fmt_bytes(abs(room))}")
    gpu = r.get("gpu") or {}
    for name, v in (gpu.get("predicted_peak_bytes") or {}).items():
        lines.append(f"  GPU ({name}): {fmt_bytes(v)} of {fmt_bytes(gpu.get('limit_bytes'))}")
    verdict = "FITS" if r["fits"] else "does NOT fit"
    largest = r["largest_fitting_size"]
    lines.append(f"  size {r['target']} {verdict}; largest size that fits: {largest if largest is not None else '?'}")
    lines += [f"  note: {n}" for n in r.get("notes") or []]
    return "\n".join(lines)
