"""memscope run | ls | report | demo — the terminal face of the engine."""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from typing import Sequence

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, not a usage block
        self.exit(EXIT_BAD_INPUT, f"memscope: {message} (see '{self.prog} --help')\n")


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 8G or 512M)")
    mult = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[(m.group(2) or "")[:1].lower()]
    return int(float(m.group(1)) * mult)


def _positive(text: str) -> float:
    v = float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
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
    rep.add_argument("--html", metavar="PATH", help="write a standalone HTML report (chart, processes, output)")
    d = sub.add_parser("demo", help="run a small bundled training under memscope")
    add_run_options(d)
    d.add_argument("--seconds", type=_positive, default=20, help="how long the demo trains (20)")
    return ap


def _version() -> str:
    from . import __version__

    return __version__


def _options(ns: argparse.Namespace):
    from .runner import Options

    return Options(record_dir=ns.record, interval_s=ns.interval, pss_interval_s=ns.pss_interval,
                   grace_s=ns.grace, limit_bytes=ns.limit, agent=not ns.no_agent, summary_json=ns.summary_json,
                   scalene=ns.scalene)


def exit_status(returncode: int | None) -> int:
    """The command's own status, as a shell reports it: 128+N for death by signal N."""
    if returncode is None:
        return 0
    return 128 - returncode if returncode < 0 else returncode


def cmd_run(ns: argparse.Namespace, command: list[str] | None = None) -> int:
    from .runner import LaunchError, Run
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
        d = os.path.dirname(os.path.abspath(ns.summary_json))
        if not os.path.isdir(d) or not os.access(d, os.W_OK):
            raise LaunchError(f"cannot write the summary to {ns.summary_json}: no writable directory {d}")
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
    return exit_status(run.returncode)


def cmd_ls(ns: argparse.Namespace) -> int:
    from .store import default_record_dir, list_runs
    from .ui.terminal import fmt_bytes

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
    from .analysis.summary import summarize
    from .store import RunData, default_record_dir, find_run
    from .ui.terminal import print_final

    try:
        path = find_run(ns.record or default_record_dir(), ns.run)
    except LookupError as exc:
        sys.stderr.write(f"memscope: {exc}\n")
        return EXIT_BAD_INPUT
    rd = RunData(path)
    try:
        summary = rd.run_row()["summary"] or summarize(rd)
    finally:
        rd.close()
    if ns.html:
        from .ui.report import write_html

        try:
            print(f"memscope: report written to {write_html(path, ns.html)}")
        except OSError as exc:
            sys.stderr.write(f"memscope: cannot write {ns.html}: {exc.strerror}\n")
            return EXIT_BAD_INPUT
        return 0
    if ns.json:
        print(json.dumps(summary, indent=2))
    else:
        print_final(summary, file=sys.stdout)
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
        return {"run": cmd_run, "ls": cmd_ls, "report": cmd_report, "demo": cmd_demo}[ns.cmd](ns)
    except LaunchError as exc:
        sys.stderr.write(f"memscope: {exc}\n")
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
