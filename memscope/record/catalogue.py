"""The catalogue of runs: where records are kept, which runs a directory holds, and finding one by id."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

from .reader import RunData


@dataclass
class RunInfo:
    """One recorded run, as ``memscope ls`` lists it."""

    run_id: str
    path: str
    command: list[str]
    started_at: str
    duration_s: float | None
    exit_cause: str | None
    peak_bytes: int | None


def default_record_dir() -> str:
    """./.memscope/runs, where records go unless told otherwise."""
    return os.path.join(os.getcwd(), ".memscope", "runs")


def list_runs(record_dir: str) -> list[RunInfo]:
    """The runs recorded in ``record_dir`` (files that are not records are skipped)."""
    out = []
    if not os.path.isdir(record_dir):
        return out
    for name in sorted(os.listdir(record_dir)):
        if not name.endswith(".sqlite"):
            continue
        path = os.path.join(record_dir, name)
        try:
            rd = RunData(path)
            try:
                r = rd.run_row()
            finally:
                rd.close()
        except (sqlite3.Error, ValueError):
            continue
        s = r["summary"] or {}
        peak = s.get("peak") or {}
        out.append(
            RunInfo(
                r["id"],
                path,
                r["command"],
                r["started_at"],
                r["duration_s"],
                r["exit_cause"],
                peak.get("tree_pss_bytes") or peak.get("tree_rss_bytes"),
            )
        )
    return out


def find_run(record_dir: str, ref: str) -> str:
    """A run's file from its id, a unique id prefix, 'last', or a path."""
    if os.path.isfile(ref):
        return ref
    runs = list_runs(record_dir)
    if ref in ("last", "latest") and runs:
        return max(runs, key=lambda r: r.started_at or "").path
    hits = [r for r in runs if r.run_id == ref] or [r for r in runs if r.run_id.startswith(ref)]
    if len(hits) == 1:
        return hits[0].path
    if not hits:
        raise LookupError(f"no run '{ref}' in {record_dir}")
    raise LookupError(f"'{ref}' matches {len(hits)} runs in {record_dir}; give more of the id")
