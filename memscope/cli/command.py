"""The command protocol: one module per subcommand, each a class with two methods; its docstring's first line is
its ``--help`` line (memray's ``commands/``)."""

from __future__ import annotations

import argparse
from typing import ClassVar, Protocol


class Command(Protocol):
    """A subcommand of ``memscope``."""

    name: ClassVar[str]
    usage: ClassVar[str | None]

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Add the subcommand's arguments."""

    def run(self, ns: argparse.Namespace) -> int:
        """Do it; returns the process's exit status (LaunchError is said in one line by ``main``)."""


def help_line(cmd: type) -> str:
    """A command's ``--help`` line: its docstring's first paragraph, on one line."""
    return " ".join((cmd.__doc__ or "").strip().split("\n\n")[0].split())


def one_line(exc: BaseException) -> str:
    """An exception as one short line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
