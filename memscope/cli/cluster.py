"""``memscope cluster``: a multi-node job's memory, read from Prometheus, as a table or a standalone page."""

from __future__ import annotations

import argparse
import sys
from typing import ClassVar

from .. import outfile
from ..errors import ClusterError
from .options import EXIT_BAD_INPUT


class ClusterCommand:
    """a multi-node job's memory, read from Prometheus"""

    name: ClassVar[str] = "cluster"
    usage: ClassVar[str | None] = "memscope cluster PROMETHEUS_URL [--run ID | --job NAME] [--since 6h] [--html OUT]"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """The URL, --run or --job, --since, --html."""
        parser.add_argument("url", help="Prometheus' address, e.g. http://prometheus:9090")
        parser.add_argument("--run", help="one run's id (the run label)")
        parser.add_argument("--job", help="Prometheus' scrape job (the job label)")
        parser.add_argument("--since", default="6h", help="how far back to look (6h; 90s, 15m, 2d...)")
        parser.add_argument("--html", metavar="OUT", help="write a standalone page (a chart per hostname/rank)")

    def run(self, ns: argparse.Namespace) -> int:
        """Print the job's table (or write its page)."""
        from ..record.cluster import load_job  # http.client, urllib: only for this command
        from ..ui.cluster import text_table, write_html  # bokeh: imported by the view

        try:
            job = load_job(ns.url, run=ns.run, job=ns.job, since=ns.since)
        except ClusterError as exc:
            sys.stderr.write(f"memscope: {exc}\n")
            return EXIT_BAD_INPUT
        if ns.html:
            try:
                written = write_html(job, ns.html)
                print(
                    f"memscope: job view written to {written}",
                    file=sys.stderr if outfile.is_stdout(ns.html) else sys.stdout,
                )
            except OSError as exc:
                sys.stderr.write(f"memscope: cannot write {ns.html}: {exc.strerror}\n")
                return EXIT_BAD_INPUT
        else:
            print(text_table(job))
        return 0
