"""``memscope demo``: a small bundled training, run under memscope."""

from __future__ import annotations

import argparse
import os
import sys
from typing import ClassVar

from .options import _positive, add_run_options
from .run import RunCommand

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "demo", "train_demo.py")


class DemoCommand:
    """run a small bundled training under memscope"""

    name: ClassVar[str] = "demo"
    usage: ClassVar[str | None] = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """The run options and --seconds."""
        add_run_options(parser)
        parser.add_argument(
            "--seconds",
            type=_positive,
            default=30,
            help="how long the demo trains (30: a leak verdict needs 20 s of training)",
        )

    def run(self, ns: argparse.Namespace) -> int:
        """Run the demo as ``memscope run`` would."""
        return RunCommand().run(ns, [sys.executable, DEMO, "--seconds", str(ns.seconds)])
