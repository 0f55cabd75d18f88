"""memscope run | ls | report | snapshot | demo — the terminal face of the engine."""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import time
from typing import Sequence

EXIT_BAD_INPUT = 2
CUDA_HISTORY_ENTRIES = 20000  # each entry holds a Python stack: some tens of MB of host memory at most


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, not a usage block
        self.exit(EXIT_BAD_INPUT, f"memscope: {message} (see '{self.prog} --help')\n")


MAX_SIZE = 2**63 - 1      # what the record (SQLite INTEGER) can hold; no machine has more
MAX_SECONDS = 86400.0     # a sampling period or grace longer than a day is a typo


def parse_size(text: str) -> int:
    """'12G', '512MiB', '4096' (bytes): a positive size that fits the record."""
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
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v) or v <= 0 or v > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_SECONDS:g}: {text}")
    return v


def _positive_int(text: str) -> int:
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
    p.add_argument("--interval", type=_positive, default=0.2, metavar="S", help="RSS sampling period (0.2)")
    p.add_argument("--pss-interval", type=_positive, default=2.0, metavar="S", help="PSS sampling period (2)")
    p.add_argument("--grace", type=_positive, default=5.0, metavar="S",
                   help="seconds between SIGINT, SIGTERM and SIGKILL when stopping (5)")
    p.add_argument("--limit", type=parse_size, metavar="SIZE",
                   help="a memory budget to compare against, e.g. 12G (default: the container's limit)")
    p.add_argument("--no-agent", action="store_true", help="sample from outside only; load nothing into the run")
    # Exact option strings: argparse matches "--scalene=memory" whole before splitting at "=", so a bare --scalene
    # never swallows the script name that follows it.
    p.add_argument("--scalene", "--scalene=cpu", dest="scalene", action="store_const", const="cpu", default=None,
                   help="run the script under Scalene, profiling off, for on-demand snapshots (CPU only); "
                        "--scalene=memory adds memory figures")
    p.add_argument("--scalene=memory", dest="scalene", action="store_const", const="memory", help=argparse.SUPPRESS)
    p.add_argument("--cuda-history", dest="cuda_history", action="store_const", const=CUDA_HISTORY_ENTRIES,
                   help="record CUDA allocation history (the last %d allocations, with their Python frames) so "
                        "that the snapshot saved at a CUDA OOM shows what led to it" % CUDA_HISTORY_ENTRIES)
    p.add_argument("--cuda-history-entries", dest="cuda_history", type=_positive_int, metavar="N",
                   help="the same, keeping the last N allocations")
    g = p.add_argument_group("Prometheus (one endpoint per node; see the README's multi-node recipe)")
    g.add_argument("--prometheus", type=_listen, metavar="[HOST:]PORT",
                   help="serve the run's memory, leak slope and exit cause to Prometheus on PORT (127.0.0.1; "
                        ":PORT listens on every interface)")
    g.add_argument("--hostname", metavar="NAME", help="the hostname label (default: this machine's name)")
    g.add_argument("--pushgateway", type=_pushgateway, metavar="URL",
                   help="push the final state to this Pushgateway when the run ends")
    g.add_argument("--prometheus-linger", type=float, default=0.0, metavar="S",
                   help="keep the endpoint up S seconds after the end, so that a scrape sees the exit (0)")


def _listen(text: str) -> str:
    from .export.prometheus import parse_listen

    try:
        parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _pushgateway(text: str) -> str:
    from .export.prometheus import check_pushgateway

    try:
        return check_pushgateway(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="memscope", description="A memory profiler for training runs.")
    ap.add_argument("--version", action="version", version=f"memscope {_version()}")
    sub = ap.add_subparsers(dest="cmd", parser_class=_Parser)
    r = sub.add_parser("run", help="run a command under memscope",
                       usage="memscope run [options] script.py [args] | memscope run [options] -- CMD [args]")
    add_run_options(r)
    r.add_argument("--attach", type=int, metavar="PID", help="watch a running process tree (sampling only)")
    r.add_argument("command", nargs=argparse.REMAINDER, help="script.py [args], or -- CMD [args]")
    ls = sub.add_parser("ls", help="list recorded runs")
    ls.add_argument("--record", metavar="DIR")
    rep = sub.add_parser("report", help="a recorded run's summary")
    rep.add_argument("run", help="run id, a unique prefix of it, 'last', or the record's path")
    rep.add_argument("--record", metavar="DIR")
    rep.add_argument("--json", action="store_true", help="print the summary as JSON")
    rep.add_argument("--html", metavar="PATH", nargs="?", const="",
                     help="write a standalone HTML report (chart, processes, output) to PATH (./<run id>.html)")
    add_snapshot_parser(sub)
    c = sub.add_parser("cluster", help="a multi-node job's memory, read from Prometheus",
                       usage="memscope cluster PROMETHEUS_URL [--run ID | --job NAME] [--since 6h] [--html OUT]")
    c.add_argument("url", help="Prometheus' address, e.g. http://prometheus:9090")
    c.add_argument("--run", help="one run's id (the run label)")
    c.add_argument("--job", help="Prometheus' scrape job (the job label)")
    c.add_argument("--since", default="6h", help="how far back to look (6h; 90s, 15m, 2d...)")
    c.add_argument("--html", metavar="OUT", help="write a standalone page (a chart per hostname/rank)")
    d = sub.add_parser("demo", help="run a small bundled training under memscope")
    add_run_options(d)
    d.add_argument("--seconds", type=_positive, default=30, help="how long the demo trains (30: a leak verdict needs 20 s of training)")
    return ap


def _version() -> str:
    from . import __version__

    return __version__


def _options(ns: argparse.Namespace):
    from .runner import Options

    return Options(record_dir=ns.record, interval_s=ns.interval, pss_interval_s=ns.pss_interval,
                   grace_s=ns.grace, limit_bytes=ns.limit, agent=not ns.no_agent, summary_json=ns.summary_json,
                   scalene=ns.scalene, cuda_history=getattr(ns, "cuda_history", None),
                   prometheus=ns.prometheus, hostname=ns.hostname,
                   pushgateway=ns.pushgateway, prometheus_linger_s=max(0.0, ns.prometheus_linger))


def exit_status(returncode: int | None) -> int:
    """The command's own status, as a shell reports it: 128+N for death by signal N."""
    if returncode is None:
        return 0
    return 128 - returncode if returncode < 0 else returncode


def cmd_run(ns: argparse.Namespace, command: list[str] | None = None) -> int:
    from .runner import LaunchError, Run, check_summary_path
    from .ui.terminal import TerminalView, print_final

    argv = list(command if command is not None else ns.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    attach = getattr(ns, "attach", None)
    if attach is not None and argv:
        raise LaunchError("give either --attach PID or a command, not both")
    if attach is None and not argv:
        raise LaunchError("no command given: memscope run train.py [args] | memscope run -- CMD [args]")
    if ns.summary_json:
        check_summary_path(ns.summary_json)
    from . import supervise

    supervise.declare_sole_launcher()  # this process starts nothing but the run: its orphans are the run's
    run = Run(argv or None, attach=attach, options=_options(ns))
    presses = {"n": 0}
    view: TerminalView | None = None

    pending: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        # Like systemd and docker: SIGTERM is passed on (a training may checkpoint on it), SIGKILL only after the
        # grace period; Ctrl-C stops gracefully; a second SIGINT or SIGTERM kills.
        if run.status == "starting":
            pending.append(signum)  # acted on right after start(), below
            return
        if signum == signal.SIGHUP:
            if run.attached:
                run.detach()
            else:
                run.forward(signal.SIGHUP)  # a hangup reaches the foreground group: the run's, not only memscope
            return
        presses["n"] += 1
        if run.attached:
            run.detach()
        elif presses["n"] == 1 and signum == signal.SIGINT:
            if view is not None:
                view.note = "stopping… (Ctrl-C again to kill)"
            else:
                sys.stderr.write("\nmemscope: stopping the run (Ctrl-C again to kill)\n")
            run.stop(wait=False)
        elif presses["n"] == 1 and signum == signal.SIGTERM:
            sys.stderr.write(f"\nmemscope: SIGTERM: passing it on to the run, SIGKILL in {ns.grace:g} s\n")
            run.terminate(wait=False)
        else:
            run.kill(wait=False)

    def on_tstp(_signum: int, _frame: object) -> None:
        # Ctrl-Z: the run is in a session of its own, so the terminal's SIGTSTP reached memscope alone. Stop
        # the run, then memscope itself (the shell's job control sees memscope stopped and says so).
        if run.status != "starting" and not run.attached:
            run.suspend()
        os.kill(os.getpid(), signal.SIGSTOP)

    def on_cont(_signum: int, _frame: object) -> None:
        if run.status != "starting" and not run.attached:
            run.resume()

    # Handlers first: a Ctrl-C must never leave the run behind, not even during start-up. A SIGHUP that was
    # ignored when memscope started (nohup) stays ignored, for memscope and the run alike.
    handled = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        handled.append(signal.SIGHUP)
    for sig in handled:
        signal.signal(sig, on_signal)
    if signal.getsignal(signal.SIGTSTP) != signal.SIG_IGN:
        signal.signal(signal.SIGTSTP, on_tstp)
    signal.signal(signal.SIGCONT, on_cont)
    run.start()
    for signum in dict.fromkeys(pending):  # signals during start-up, each kind once: now act on them
        on_signal(signum, None)
    if run.exporter is not None and run.exporter.url and not ns.quiet:
        sys.stderr.write(f"memscope: Prometheus metrics at {run.exporter.url}\n")
    view = TerminalView(run).start() if not ns.quiet and TerminalView.wanted() else None
    try:
        while not run.ended:
            time.sleep(0.1)
    finally:
        if view is not None:
            view.close()
    summary = run.wait() or {}
    if not ns.quiet:
        print_final(summary)
    if run.exporter is not None:  # the final push, and the last scrape of the final state
        from .export.prometheus import PUSH_TIMEOUT_S

        run.exporter.wait_closed(run.options.prometheus_linger_s + PUSH_TIMEOUT_S + 5)
    return exit_status(run.returncode)


def cmd_ls(ns: argparse.Namespace) -> int:
    from .record.catalogue import default_record_dir, list_runs
    from .fmt import fmt_bytes

    d = ns.record or default_record_dir()
    runs = list_runs(d)
    if not runs:
        print(f"no runs recorded in {d}")
        return 0
    for r in runs:
        dur = f"{r.duration_s:8.1f}s" if r.duration_s is not None else "     ---"
        print(f"{r.run_id}  {r.started_at or '':24}  {dur}  {r.exit_cause or 'unfinished':16}  "
              f"{fmt_bytes(r.peak_bytes):>10}  {' '.join(r.command)[:80]}")
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    import sqlite3

    from .analysis.summary import read_summary
    from .record.catalogue import default_record_dir, find_run

    try:
        path = find_run(ns.record or default_record_dir(), ns.run)
    except LookupError as exc:
        sys.stderr.write(f"memscope: {exc}\n")
        return EXIT_BAD_INPUT
    # Whatever the file holds (empty, truncated, not SQLite, another program's database, a record whose summary
    # is not JSON): one line, never a traceback.
    try:
        summary = read_summary(path)
        if ns.html is not None:
            from .ui.report import write_html

            # --html alone: ./<run id>.html
            out = ns.html or f"{summary.get('run_id') or os.path.splitext(os.path.basename(path))[0]}.html"
            try:
                print(f"memscope: report written to {os.path.abspath(write_html(path, out))}")
            except OSError as exc:
                sys.stderr.write(f"memscope: cannot write {out}: {exc.strerror or exc}\n")
                return EXIT_BAD_INPUT
            return 0
    except (sqlite3.Error, ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
        sys.stderr.write(f"memscope: {path} is not a readable memscope record ({_one_line(exc)})\n")
        return EXIT_BAD_INPUT
    if ns.json:
        print(json.dumps(summary, indent=2))
    else:
        from .ui.terminal import print_final

        print_final(summary, file=sys.stdout)
    return 0


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


def add_snapshot_parser(sub: "argparse._SubParsersAction") -> None:
    """`memscope snapshot FILE [--json] [--html OUT]`: a CUDA memory snapshot pickle, read safely."""
    p = sub.add_parser("snapshot", help="read a CUDA memory snapshot (torch.cuda.memory._dump_snapshot, or the "
                                        "one memscope saves at a CUDA OOM)")
    p.add_argument("file", help="the snapshot pickle")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (schema memscope.snapshot/1)")
    p.add_argument("--html", metavar="OUT", help="write one standalone HTML page: timeline, segments, allocations")


def cmd_snapshot(ns: argparse.Namespace) -> int:
    from .analysis import snapshot as snap_mod

    try:
        snap = snap_mod.load(ns.file)
    except snap_mod.SnapshotError as exc:
        sys.stderr.write(f"memscope: {exc}\n")
        return EXIT_BAD_INPUT
    summary = snap_mod.summarize(snap)
    if ns.html:
        from .ui.snapshot_view import render_html

        try:
            page = render_html(snap, os.path.basename(ns.file), summary)
            with open(ns.html, "w", encoding="utf-8") as f:
                f.write(page)
        except OSError as exc:
            sys.stderr.write(f"memscope: cannot write {ns.html}: {exc.strerror or exc}\n")
            return EXIT_BAD_INPUT
        if not ns.json:
            print(f"memscope: snapshot page written to {ns.html}")
    if ns.json:
        print(json.dumps(summary, indent=2))
    elif not ns.html:
        from .fmt import fmt_bytes

        for d in summary["devices"]:
            print(f"cuda:{d['device']}  reserved {fmt_bytes(d['reserved_bytes'], 'torch')}  allocated "
                  f"{fmt_bytes(d['allocated_bytes'], 'torch')}  free in segments {fmt_bytes(d['free_in_segments_bytes'], 'torch')} "
                  f"(largest block {fmt_bytes(d['largest_free_block_bytes'], 'torch')})  {d['segments']} segments  "
                  f"{d['trace_events']} trace events")
        for a in summary["advice"]:
            print(f"- {a}")
    return 0


def cmd_cluster(ns: argparse.Namespace) -> int:
    from .cluster import ClusterError, load_job
    from .ui.cluster import text_table, write_html

    try:
        job = load_job(ns.url, run=ns.run, job=ns.job, since=ns.since)
    except ClusterError as exc:
        sys.stderr.write(f"memscope: {exc}\n")
        return EXIT_BAD_INPUT
    if ns.html:
        try:
            print(f"memscope: job view written to {write_html(job, ns.html)}")
        except OSError as exc:
            sys.stderr.write(f"memscope: cannot write {ns.html}: {exc.strerror}\n")
            return EXIT_BAD_INPUT
    else:
        print(text_table(job))
    return 0


def cmd_demo(ns: argparse.Namespace) -> int:
    demo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo", "train_demo.py")
    return cmd_run(ns, [sys.executable, demo, "--seconds", str(ns.seconds)])


def main(argv: Sequence[str] | None = None) -> int:
    from .runner import LaunchError

    ap = build_parser()
    ns = ap.parse_args(argv)
    if ns.cmd is None:
        ap.print_help()
        return EXIT_BAD_INPUT
    try:
        return {"run": cmd_run, "ls": cmd_ls, "report": cmd_report, "demo": cmd_demo,
                "snapshot": cmd_snapshot,
                "cluster": cmd_cluster}[ns.cmd](ns)
    except LaunchError as exc:
        sys.stderr.write(f"memscope: {exc}\n")
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
