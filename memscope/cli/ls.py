"""``memscope ls``: the recorded runs of a directory."""

from __future__ import annotations

import argparse
import os
import sys
from typing import ClassVar

from ..fmt import fmt_bytes
from ..redact import redact_argv
from .options import EXIT_BAD_INPUT


class LsCommand:
    """list recorded runs"""

    name: ClassVar[str] = "ls"
    usage: ClassVar[str | None] = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """--record DIR."""
        parser.add_argument("--record", metavar="DIR", help="the directory of records (./.memscope/runs)")

    def run(self, ns: argparse.Namespace) -> int:
        """One line per run: id, start, duration, state (running, ended, unfinished), exit cause, peak, size on
        disk (the record and every file of its run beside it), command."""
        # Imported here: every command's module is imported for `memscope --help` and for `memscope run`'s start.
        from ..record.catalogue import default_record_dir, files_size, record_files, run_state, scan_runs

        d = ns.record or default_record_dir()
        if os.path.exists(d) and not os.path.isdir(d):  # a record's file given for its directory
            sys.stderr.write(
                f"memscope: --record {d}: not a directory (give the directory of records; "
                "'memscope report FILE' reads one record)\n"
            )
            return EXIT_BAD_INPUT
        runs, skipped = scan_runs(d)
        for path, why in skipped:  # one line each; the other runs are still listed
            sys.stderr.write(f"memscope: skipped {path}: not a readable memscope record ({why})\n")
        if not runs:
            print(f"no runs recorded in {d}")
            return 0
        for r in runs:
            dur = f"{r.duration_s:8.1f}s" if r.duration_s is not None else "     ---"
            state = run_state(r)
            size = files_size(record_files(r))
            print(
                f"{r.run_id}  {r.started_at or '':24}  {dur}  {state:10}  {r.exit_cause or '---':16}  "
                f"{fmt_bytes(r.peak_bytes):>10}  {fmt_bytes(size):>10}  {_one_line(' '.join(redact_argv(r.command)))[:80]}"
            )
        return 0


def _one_line(text: str) -> str:
    """A command on one line of the listing (a `python -c` program has newlines)."""
    return " ".join(text.split())
