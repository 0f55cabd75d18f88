"""memscope run | ls | prune | report | stacks | snapshot | cluster | monitoring | fit | demo — the terminal face of the engine.

One module per subcommand (``command.Command``: the class docstring is its ``--help`` line); the run options
shared with ``%memscope`` are in ``options``.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
from typing import Sequence

from ..errors import LaunchError
from ..version import __version__
from .cluster import ClusterCommand
from .command import Command, help_line
from .demo import DemoCommand
from .fit import FitCommand
from .ls import LsCommand
from .monitoring import MonitoringCommand
from .options import EXIT_BAD_INPUT, Parser
from .prune import PruneCommand
from .report import ReportCommand
from .run import RunCommand
from .snapshot import SnapshotCommand
from .stacks import StacksCommand

# The order of `memscope --help`.
COMMANDS: tuple[type[Command], ...] = (
    RunCommand,
    LsCommand,
    PruneCommand,
    ReportCommand,
    StacksCommand,
    SnapshotCommand,
    ClusterCommand,
    MonitoringCommand,
    FitCommand,
    DemoCommand,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``memscope`` parser, one subparser per command."""
    ap = Parser(prog="memscope", description="A memory profiler for training runs.")
    ap.add_argument("--version", action="version", version=f"memscope {__version__}")
    sub = ap.add_subparsers(dest="cmd", parser_class=Parser)
    for cls in COMMANDS:
        cls().prepare_parser(sub.add_parser(cls.name, help=help_line(cls), usage=cls.usage or None))
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """``memscope ...``: the exit status."""
    ap = build_parser()
    ns = ap.parse_args(argv)
    if ns.cmd is None:
        ap.print_help()
        return EXIT_BAD_INPUT
    try:
        return next(cls for cls in COMMANDS if cls.name == ns.cmd)().run(ns)
    except LaunchError as exc:
        sys.stderr.write(f"memscope: {exc}\n")
        return EXIT_BAD_INPUT


def console_main() -> None:
    """The ``memscope`` command and ``python -m memscope``: ``main``, then the exit without the interpreter's
    teardown.

    memscope's work is closed by then (the record, the summary file, the exporter's last push); the teardown would
    only collect and clear the engine's objects and modules, 20 ms after every ``memscope run`` on the 2-core VM,
    a seventh of its fixed cost (BENCHMARKS.md). The exit handlers still run and the output is flushed; where a
    thread that is not a daemon is still going, or the output cannot be flushed (a reader that left), the exit is
    the ordinary one, which waits for the thread and reports the broken pipe as Python always does.
    """
    status = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        sys.exit(status)
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(status)
    atexit._run_exitfuncs()
    os._exit(status)
