"""``memscope monitoring``: write the Grafana dashboard and the Prometheus rules for memscope's exporter."""

from __future__ import annotations

import argparse
import sys
from typing import ClassVar


class MonitoringCommand:
    """write a Grafana dashboard and Prometheus alert rules"""

    name: ClassVar[str] = "monitoring"
    usage: ClassVar[str | None] = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """--out DIR, --runbook-base URL."""
        parser.add_argument("--out", metavar="DIR", required=True, help="the folder to write the two files into")
        parser.add_argument(
            "--runbook-base",
            metavar="URL",
            help="where the alerts' runbook links point (default: memscope's README on PyPI; "
            "a team's own copy of the README section 'Grafana and alerts')",
        )

    def run(self, ns: argparse.Namespace) -> int:
        """Write the files, then one line each."""
        from ..export import monitoring

        base = ns.runbook_base or monitoring.rules_mod.RUNBOOK_BASE
        try:
            paths = monitoring.write(ns.out, base)
        except OSError as exc:
            sys.stderr.write(f"memscope: cannot write into {ns.out}: {exc.strerror or exc}\n")
            return 1
        for p in paths:
            print(p)
        print("Grafana: Dashboards > New > Import, the .json file; Prometheus: rule_files, the .yaml file.")
        return 0
