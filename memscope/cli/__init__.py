"""memscope run | ls | prune | report | stacks | snapshot | cluster | demo — the terminal face of the engine.

One module per subcommand (``command.Command``: the class docstring is its ``--help`` line); the run options
shared with ``%memscope`` are in ``options``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..errors import LaunchError
from ..version import __version__
from .cluster import ClusterCommand
from .command import Command, help_line
from .demo import DemoCommand
from .ls import LsCommand
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
    DemoCommand,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``memscope`` parser, one subparser per command."""
    ap = Parser(prog="memscope", description="A memory profiler for training runs.")
    ap.add_argument("--version", action="version", version=f"memscope {__version__}")
    sub = ap.add_subparsers(dest="cmd", parser_class=Parser)
    for cls in COMMANDS:
        kw = {"usage": cls.usage} if cls.usage else {}
        cls().prepare_parser(sub.add_parser(cls.name, help=help_line(cls), **kw))
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
