"""``memscope report``: a recorded run's summary, as text, JSON or a standalone HTML page."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, ClassVar

from .. import outfile
from ..redact import redact_argv, redact_text
from .command import one_line
from .options import EXIT_BAD_INPUT


class ReportCommand:
    """a recorded run's summary"""

    name: ClassVar[str] = "report"
    usage: ClassVar[str | None] = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """The run, --record, --json, --html."""
        parser.add_argument("run", help="run id, a unique prefix of it, 'last', or the record's path")
        parser.add_argument("--record", metavar="DIR")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")
        parser.add_argument(
            "--html",
            metavar="PATH",
            nargs="?",
            const="",
            help="write a standalone HTML report (chart, processes, output) to PATH (./<run id>.html)",
        )

    def run(self, ns: argparse.Namespace) -> int:
        """Print (or write) the report; a file that is no record is said in one line, never a traceback."""
        from ..analysis.summary import read_summary  # the analyses: only for this command
        from ..record.catalogue import default_record_dir, find_run

        try:
            path = find_run(ns.record or default_record_dir(), ns.run)
        except LookupError as exc:
            sys.stderr.write(f"memscope: {exc}\n")
            return EXIT_BAD_INPUT
        # Whatever the file holds (empty, truncated, not SQLite, another program's database, a record whose
        # summary is not JSON): one line, never a traceback.
        try:
            summary = read_summary(path)
            if ns.html is not None:
                from ..ui.report import write_html  # bokeh: only when a page is asked for

                # --html alone: ./<run id>.html
                out = ns.html or f"{summary.get('run_id') or os.path.splitext(os.path.basename(path))[0]}.html"
                try:
                    written = os.path.abspath(write_html(path, out))
                    # --html /dev/stdout: the page is the output, the note goes beside it
                    note = sys.stderr if outfile.is_stdout(out) else sys.stdout
                    print(f"memscope: report written to {written}", file=note)
                except OSError as exc:
                    sys.stderr.write(f"memscope: cannot write {out}: {exc.strerror or exc}\n")
                    return EXIT_BAD_INPUT
                return 0
        except Exception as exc:  # sqlite3.Error, ValueError, ... and valid JSON of any shape read as a summary
            sys.stderr.write(f"memscope: {path} is not a readable memscope record ({one_line(exc)})\n")
            return EXIT_BAD_INPUT
        _redact(summary)  # a record written before redaction still holds its command lines as they were
        if ns.json:
            print(json.dumps(summary, indent=2))
        else:
            from ..ui.terminal import print_final

            try:
                print_final(summary, file=sys.stdout)
            except Exception as exc:  # a summary of the wrong shape ("leak": "x", "warnings": {}): one line
                sys.stderr.write(f"memscope: {path} is not a readable memscope record ({one_line(exc)})\n")
                return EXIT_BAD_INPUT
        return 0


def _redact(summary: dict[str, Any]) -> None:
    """The summary's command lines with their secrets replaced by *** (memscope.redact), in place."""
    if isinstance(summary.get("command"), list):
        summary["command"] = redact_argv(summary["command"])
    for p in summary.get("processes") or []:
        if isinstance(p, dict) and isinstance(p.get("cmdline"), str):
            p["cmdline"] = redact_text(p["cmdline"])
