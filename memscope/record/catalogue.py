"""The catalogue of runs: where records are kept, which runs a directory holds, and finding one by id."""

from __future__ import annotations

import math
import os
import sqlite3
import stat
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
    return scan_runs(record_dir)[0]


def scan_runs(record_dir: str) -> tuple[list[RunInfo], list[tuple[str, str]]]:
    """(the runs recorded in ``record_dir`` in the order they started, [(path, why it was skipped)] for each
    ``*.sqlite`` that is not a readable record). One bad file never hides the others."""
    out: list[RunInfo] = []
    skipped: list[tuple[str, str]] = []
    if not os.path.isdir(record_dir):
        return out, skipped
    for name in sorted(os.listdir(record_dir)):
        if not name.endswith(".sqlite"):
            continue
        path = os.path.join(record_dir, name)
        try:
            # Never open anything but a regular file: SQLite opening a FIFO waits for a writer forever.
            if not stat.S_ISREG(os.stat(path).st_mode):
                skipped.append((path, "not a regular file"))
                continue
            rd = RunData(path)
            try:
                r = rd.run_row()
            finally:
                rd.close()
            out.append(_info(path, r))
        except (sqlite3.Error, ValueError, OSError) as exc:
            skipped.append((path, " ".join(str(exc).split())[:200] or type(exc).__name__))
    out.sort(key=_started)
    return out, skipped


def _info(path: str, r: dict) -> RunInfo:
    """A run's line from its row, whose columns are whatever the file holds: valid JSON of another shape (a
    summary that is a list, a peak that is a string) reads as unknown; a row without an id or a command is no
    record (ValueError)."""
    command = r["command"]
    if not isinstance(r["id"], str) or not r["id"] or not isinstance(command, list):
        raise ValueError("its run row has no id or no command")
    s = r["summary"] if isinstance(r["summary"], dict) else {}
    peak = s.get("peak") if isinstance(s.get("peak"), dict) else {}
    peak_bytes = next((v for v in (peak.get("tree_pss_bytes"), peak.get("tree_rss_bytes")) if _num(v) and v), None)
    return RunInfo(
        r["id"],
        path,
        [str(a) for a in command],
        r["started_at"] if isinstance(r["started_at"], str) else "",
        float(r["t0_epoch"]) if _num(r["t0_epoch"]) else None,
        float(r["duration_s"]) if _num(r["duration_s"]) else None,
        r["exit_cause"] if isinstance(r["exit_cause"], str) else None,
        int(peak_bytes) if peak_bytes is not None else None,
    )


def _num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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
