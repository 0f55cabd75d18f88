"""The catalogue of runs: where records are kept, which runs a directory holds, and finding one by id."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime

from .reader import RunData


@dataclass
class RunInfo:
    """One recorded run, as ``memscope ls`` lists it."""

    run_id: str
    path: str
    command: list[str]
    started_at: str
    t0_epoch: float | None  # when it started, to the microsecond (started_at is to the second)
    duration_s: float | None
    exit_cause: str | None
    peak_bytes: int | None


def default_record_dir() -> str:
    """./.memscope/runs, where records go unless told otherwise."""
    return os.path.join(os.getcwd(), ".memscope", "runs")


def list_runs(record_dir: str) -> list[RunInfo]:
    """The runs recorded in ``record_dir``, in the order they started (files that are not records are skipped)."""
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
                r["t0_epoch"] if isinstance(r["t0_epoch"], (int, float)) else None,
                r["duration_s"],
                r["exit_cause"],
                peak.get("tree_pss_bytes") or peak.get("tree_rss_bytes"),
            )
        )
    out.sort(key=_started)
    return out


def _started(r: RunInfo) -> tuple[float, str]:
    # In the order they started: by t0_epoch (to the microsecond). Ordered by started_at, a string to the second,
    # two runs of one second came in the order of their ids' random part and `report last` took either.
    if r.t0_epoch is not None:
        return r.t0_epoch, r.run_id
    try:
        return datetime.strptime(r.started_at or "", "%Y-%m-%dT%H:%M:%S%z").timestamp(), r.run_id
    except ValueError:
        return 0.0, r.run_id


def find_run(record_dir: str, ref: str) -> str:
    """A run's file from its id, a unique id prefix, 'last', or a path."""
    if os.path.isfile(ref):
        return ref
    runs = list_runs(record_dir)
    if ref in ("last", "latest") and runs:
        return runs[-1].path
    hits = [r for r in runs if r.run_id == ref] or [r for r in runs if r.run_id.startswith(ref)]
    if len(hits) == 1:
        return hits[0].path
    if not hits:
        raise LookupError(f"no run '{ref}' in {record_dir}")
    raise LookupError(f"'{ref}' matches {len(hits)} runs in {record_dir}; give more of the id")
