"""``memscope stacks``: every process's stacks of a run going on now (started by `memscope run` elsewhere, or
by a notebook), printed here. The memscope that supervises the run does the signalling, with its proofs; this
command only leaves a request in the run's private directory and reads the capture from the record."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import ClassVar

from .options import EXIT_BAD_INPUT, _positive


class StacksCommand:
    """every process's Python stacks of a running run"""

    name: ClassVar[str] = "stacks"
    usage: ClassVar[str | None] = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """The run, --record, --timeout."""
        parser.add_argument("run", nargs="?", default="last", help="run id, a unique prefix of it, 'last' (default)")
        parser.add_argument("--record", metavar="DIR")
        parser.add_argument("--timeout", type=_positive, default=10.0, metavar="S", help="wait this long (10)")

    def run(self, ns: argparse.Namespace) -> int:
        """Ask, wait for the capture in the record, print it."""
        # Imported here: every command's module is imported for `memscope --help` and for `memscope run`'s start.
        from ..analysis.stacks import text
        from ..record.catalogue import default_record_dir, find_run
        from ..record.reader import RunData
        from ..session.stacks import request

        try:
            path = find_run(ns.record or default_record_dir(), ns.run)
            rd = RunData(path)
            row = rd.run_row()
        except Exception as exc:  # LookupError, sqlite3.Error, ValueError
            sys.stderr.write(f"memscope: {exc}\n")
            return EXIT_BAD_INPUT
        try:
            where = (row.get("meta") or {}).get("agent_dir")
            if rd.ended():
                sys.stderr.write(f"memscope: run {row['id']} has ended: stacks need its processes alive\n")
                return EXIT_BAD_INPUT
            if not where or not os.path.isdir(where):
                sys.stderr.write(f"memscope: run {row['id']} has no agent directory (no agent, or it has ended)\n")
                return EXIT_BAD_INPUT
            try:
                rid = request(where)
            except OSError as exc:
                sys.stderr.write(f"memscope: cannot ask run {row['id']}: {exc.strerror or exc}\n")
                return EXIT_BAD_INPUT
            deadline = time.monotonic() + ns.timeout
            while time.monotonic() < deadline:
                got = [e for e in rd.events("stacks") if e["data"].get("request") == rid]
                if got:
                    print(text(got[0]["data"]))
                    return 0
                if rd.ended():
                    break
                time.sleep(0.1)
            sys.stderr.write(f"memscope: run {row['id']} did not answer within {ns.timeout:g} s\n")
            return 1
        finally:
            rd.close()
