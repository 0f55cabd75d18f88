"""The run options memscope's command line and the notebook's ``%memscope`` share (public: the IPython extension
builds its parser from these), and the parser that says a bad option in one line."""

from __future__ import annotations

import argparse
import math
import re

from ..session.options import MIN_INTERVAL_S, Options

EXIT_BAD_INPUT = 2
CUDA_HISTORY_ENTRIES = 20000  # each entry holds a Python stack: some tens of MB of host memory at most


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one clear line, not a usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Say the error in one line and exit with status 2."""
        self.exit(EXIT_BAD_INPUT, f"memscope: {message} (see '{self.prog} --help')\n")


MAX_SIZE = 2**63 - 1  # what the record (SQLite INTEGER) can hold; no machine has more
MAX_SECONDS = 86400.0  # a sampling period or grace longer than a day is a typo


def parse_size(text: str) -> int:
    """'12G', '12 GiB', '512MiB', '4096' (bytes): a positive size that fits the record. Units are powers of 1024
    (K, M, G, T, with or without 'B'/'iB'); a space between the number and its unit is allowed, as ``--older-than``
    allows one ('30 d')."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 8G or 512M)")
    mult = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[(m.group(2) or "").lower()]
    v = float(m.group(1)) * mult
    if not math.isfinite(v) or v > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"too large a size: {text!r}")
    if int(v) <= 0:
        raise argparse.ArgumentTypeError(f"a size must be more than 0: {text!r}")
    return int(v)


def _positive(text: str) -> float:
    """Seconds: finite, above 0, at most a day (NaN would make a busy loop, inf a sampler that never wakes)."""
    return _seconds(text, zero_ok=False)


def _seconds_or_zero(text: str) -> float:
    """Seconds: finite, 0 or more, at most a day (inf passed the parser and broke the run's end: OverflowError)."""
    return _seconds(text, zero_ok=True)


def _interval(text: str) -> float:
    """A sampling period: finite, at least MIN_INTERVAL_S (below it a sampler spins a core for nothing), at most
    a day."""
    v = _seconds(text, zero_ok=False)
    if v < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds from {MIN_INTERVAL_S:g} to {MAX_SECONDS:g}: {text}"
        )
    return v


def _seconds(text: str, zero_ok: bool) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v > MAX_SECONDS or (v < 0 if zero_ok else v <= 0):
        lowest = "from 0 to" if zero_ok else "above 0 and at most"
        raise argparse.ArgumentTypeError(f"must be a number of seconds {lowest} {MAX_SECONDS:g}: {text}")
    return v


def _share(text: str) -> float:
    """A share of the limit: 0 to 1 (or a percentage: 90%)."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a share of the limit: {text!r} (try 0.9 or 90%)") from None
    if not math.isfinite(v) or not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"a share of the limit is from 0 to 1 (or 0% to 100%): {text}")
    return v


def _positive_int(text: str) -> int:
    """A whole number above 0."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number: {text}")
    return v


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `memscope run`, `memscope demo` and the notebook magic."""
    p.add_argument("--record", metavar="DIR", help="where records go (default ./.memscope/runs)")
    p.add_argument("--quiet", "-q", action="store_true", help="no live view")
    p.add_argument("--summary-json", metavar="PATH", help="write the summary here when the run ends")
    p.add_argument("--interval", type=_interval, default=0.2, metavar="S", help="RSS sampling period (0.2)")
    p.add_argument("--pss-interval", type=_interval, default=2.0, metavar="S", help="PSS sampling period (2)")
    p.add_argument(
        "--grace",
        type=_positive,
        default=5.0,
        metavar="S",
        help="seconds between SIGINT, SIGTERM and SIGKILL when stopping (5)",
    )
    p.add_argument(
        "--limit",
        type=parse_size,
        metavar="SIZE",
        help="a memory budget to compare against, e.g. 12G or 12GiB (1024-based; default: the container's limit)",
    )
    p.add_argument("--no-agent", action="store_true", help="sample from outside only; load nothing into the run")
    p.add_argument(
        "--stacks-at",
        type=_share,
        default=0.9,
        metavar="SHARE",
        help="take every process's stacks once the tree reaches this share of its limit (0.9; 0: never)",
    )
    p.add_argument(
        "--stall-after",
        type=_seconds_or_zero,
        default=60.0,
        metavar="S",
        help="take every process's stacks once the tree used no CPU and printed nothing for S seconds (60; 0: never)",
    )
    # Exact option strings: argparse matches "--scalene=memory" whole before splitting at "=", so a bare --scalene
    # never swallows the script name that follows it.
    p.add_argument(
        "--scalene",
        "--scalene=cpu",
        dest="scalene",
        action="store_const",
        const="cpu",
        default=None,
        help="run the script under Scalene, profiling off, for on-demand snapshots (CPU only); "
        "--scalene=memory adds memory figures",
    )
    p.add_argument("--scalene=memory", dest="scalene", action="store_const", const="memory", help=argparse.SUPPRESS)
    p.add_argument(
        "--cuda-history",
        dest="cuda_history",
        action="store_const",
        const=CUDA_HISTORY_ENTRIES,
        help=f"record CUDA allocation history (the last {CUDA_HISTORY_ENTRIES} allocations, with their Python "
        "frames) so that the snapshot saved at a CUDA OOM shows what led to it",
    )
    p.add_argument(
        "--cuda-history-entries",
        dest="cuda_history",
        type=_positive_int,
        metavar="N",
        help="the same, keeping the last N allocations",
    )
    g = p.add_argument_group("Prometheus (one endpoint per node; see the README's multi-node recipe)")
    g.add_argument(
        "--prometheus",
        type=_listen,
        metavar="[HOST:]PORT",
        help="serve the run's memory, leak slope and exit cause to Prometheus on PORT (127.0.0.1; "
        ":PORT listens on every interface)",
    )
    g.add_argument("--hostname", metavar="NAME", help="the hostname label (default: this machine's name)")
    g.add_argument(
        "--pushgateway",
        type=_pushgateway,
        metavar="URL",
        help="push the final state to this Pushgateway when the run ends",
    )
    g.add_argument(
        "--prometheus-linger",
        type=_seconds_or_zero,
        default=0.0,
        metavar="S",
        help="keep the endpoint up S seconds after the end, so that a scrape sees the exit (0)",
    )


def _listen(text: str) -> str:
    # The exporter's own parser, imported when the option is given: `memscope --help`, `ls` or a run without
    # Prometheus need none of the exporter.
    from ..export.prometheus import parse_listen

    try:
        parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _pushgateway(text: str) -> str:
    from ..export.prometheus import check_pushgateway

    try:
        return check_pushgateway(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def options_from(ns: argparse.Namespace) -> Options:
    """The run's Options from parsed run options (``add_run_options``)."""
    return Options(
        record_dir=ns.record,
        interval_s=ns.interval,
        pss_interval_s=ns.pss_interval,
        grace_s=ns.grace,
        limit_bytes=ns.limit,
        agent=not ns.no_agent,
        summary_json=ns.summary_json,
        scalene=ns.scalene,
        cuda_history=getattr(ns, "cuda_history", None),
        prometheus=ns.prometheus,
        hostname=ns.hostname,
        pushgateway=ns.pushgateway,
        prometheus_linger_s=ns.prometheus_linger,
        stacks_at=getattr(ns, "stacks_at", 0.9),
        stall_after_s=getattr(ns, "stall_after", 60.0),
    )
