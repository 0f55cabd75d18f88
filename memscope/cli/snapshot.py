"""``memscope snapshot FILE [--json] [--html OUT]``: a CUDA memory snapshot pickle, read safely."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import ClassVar

from .. import outfile
from ..fmt import fmt_bytes
from .options import EXIT_BAD_INPUT


class SnapshotCommand:
    """read a CUDA memory snapshot (torch.cuda.memory._dump_snapshot, or the one memscope saves at a CUDA OOM)"""

    name: ClassVar[str] = "snapshot"
    usage: ClassVar[str | None] = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """The file, --json, --html."""
        parser.add_argument("file", help="the snapshot pickle")
        parser.add_argument(
            "--json", action="store_true", help="print the summary as JSON (schema memscope.snapshot/1)"
        )
        parser.add_argument(
            "--html", metavar="OUT", help="write one standalone HTML page: timeline, segments, allocations"
        )

    def run(self, ns: argparse.Namespace) -> int:
        """Print the snapshot's summary (or write its page)."""
        # Imported here: every command's module is imported for `memscope --help` and for `memscope run`'s start.
        from ..analysis import snapshot as snap_mod

        try:
            snap = snap_mod.load(ns.file)
        except snap_mod.SnapshotError as exc:
            sys.stderr.write(f"memscope: {exc}\n")
            return EXIT_BAD_INPUT
        summary = snap_mod.summarize(snap)
        if ns.html:
            from ..ui.snapshot_view import render_html  # bokeh: only when a page is asked for

            try:
                page = render_html(snap, os.path.basename(ns.file), summary)
                outfile.write_text(ns.html, page)
            except OSError as exc:
                sys.stderr.write(f"memscope: cannot write {ns.html}: {exc.strerror or exc}\n")
                return EXIT_BAD_INPUT
            if not ns.json:
                note = sys.stderr if outfile.is_stdout(ns.html) else sys.stdout
                print(f"memscope: snapshot page written to {ns.html}", file=note)
        if ns.json:
            print(json.dumps(summary, indent=2))
        elif not ns.html:
            for d in summary["devices"]:
                print(
                    f"cuda:{d['device']}  reserved {fmt_bytes(d['reserved_bytes'], 'torch')}  allocated "
                    f"{fmt_bytes(d['allocated_bytes'], 'torch')}  free in segments "
                    f"{fmt_bytes(d['free_in_segments_bytes'], 'torch')} "
                    f"(largest block {fmt_bytes(d['largest_free_block_bytes'], 'torch')})  {d['segments']} segments  "
                    f"{d['trace_events']} trace events"
                )
            for a in summary["advice"]:
                print(f"- {a}")
        return 0
