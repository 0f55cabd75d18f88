"""The catalogue of runs: where records are kept, which runs a directory holds, and finding one by id."""

from __future__ import annotations

import fcntl
import math
import os
import re
import sqlite3
import stat
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..collect.platform import procfs  # /proc on Linux, psutil elsewhere: same start-time clock as the record
from .reader import RunData

RUNNING, ENDED, UNFINISHED, ENDING = "running", "ended", "unfinished", "ending"
# The run row's meta says its writer holds a lock on the record while it writes (writer.LOCK_META): records
# without it come from a memscope that held none, and nothing proves that one of them is not still being written.
WRITER_LOCK_META = "writer_lock"


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
    root_pid: int | None = None
    root_start: float | None = None  # when the record saw its root start (epoch s); None before its first round
    ended: bool = False  # the record has its end (ended_at)
    writer_lock: bool = False  # its writer held a lock on it while writing (memscope from issue 32 on)
    scalene: bool = False  # the run had a Scalene folder (<run_id>-scalene) made by memscope


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
                info = _info(path, r)
                if info.root_pid is not None:
                    info.root_start = rd.process_create_time(info.root_pid)
            finally:
                rd.close()
            out.append(info)
        except (sqlite3.Error, ValueError, OSError) as exc:
            skipped.append((path, " ".join(str(exc).split())[:200] or type(exc).__name__))
    out.sort(key=_started)
    return out, skipped


def run_info(path: str) -> RunInfo:
    """One record's line, as ``memscope ls`` lists it (raises what RunData raises on a file that is no record)."""
    rd = RunData(path)
    try:
        info = _info(path, rd.run_row())
        if info.root_pid is not None:
            info.root_start = rd.process_create_time(info.root_pid)
    finally:
        rd.close()
    return info


def _info(path: str, r: dict[str, Any]) -> RunInfo:
    """A run's line from its row, whose columns are whatever the file holds: valid JSON of another shape (a
    summary that is a list, a peak that is a string) reads as unknown; a row without an id or a command is no
    record (ValueError)."""
    command = r["command"]
    if not isinstance(r["id"], str) or not r["id"] or not isinstance(command, list):
        raise ValueError("its run row has no id or no command")
    s: dict[str, Any] = r["summary"] if isinstance(r["summary"], dict) else {}
    peak: dict[str, Any] = s["peak"] if isinstance(s.get("peak"), dict) else {}
    meta: dict[str, Any] = r["meta"] if isinstance(r.get("meta"), dict) else {}
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
        r["root_pid"] if isinstance(r["root_pid"], int) and r["root_pid"] > 0 else None,
        None,
        r["ended_at"] is not None,
        meta.get(WRITER_LOCK_META) == "flock",
        bool(meta.get("scalene")),
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
    try:
        os.stat(ref)
    except PermissionError:  # another user's record (0600 in a 0700 directory): say so, not "no run"
        raise LookupError(f"cannot read {ref}: permission denied (records are their user's only)") from None
    except OSError:
        pass
    runs = list_runs(record_dir)
    if ref in ("last", "latest") and runs:
        return runs[-1].path
    hits = [r for r in runs if r.run_id == ref] or [r for r in runs if r.run_id.startswith(ref)]
    if len(hits) == 1:
        return hits[0].path
    if not hits:
        raise LookupError(f"no run '{ref}' in {record_dir}")
    raise LookupError(f"'{ref}' matches {len(hits)} runs in {record_dir}; give more of the id")


# -- state and files -------------------------------------------------------------------------------------------
# The record's create_time is btime (an integer second, as collect/tree.py reads it) + starttime ticks: read the
# same way, the root itself matches to the tick; a pid reused since started later, by its own run's length at least.
_START_SLACK_S = 0.5
# Before the first round there is only t0 (time.time() just after the launch): the root started before it.
_T0_SLACK_S = 0.1


def run_state(info: RunInfo) -> str:
    """``running`` only when proven (the root pid is alive and is the process the record saw start: pids are
    reused), ``ended`` when the record has its end, ``ending`` when the root has exited and memscope still writes
    the record (it holds the record's lock: leftovers being stopped, the summary being made), else ``unfinished``
    (its memscope died before the end)."""
    if info.ended:
        return ENDED
    if info.root_pid is not None and _root_alive(info):
        return RUNNING
    if writer_holds(info.path):
        return ENDING
    return UNFINISHED


def writer_holds(path: str) -> bool | None:
    """Whether a memscope writer holds the record's lock now (True), none does (False), or it cannot be checked
    (None: the file cannot be opened, a symbolic link or another user's). The writer takes it (flock, exclusive)
    before the first byte and lets go after the last; the kernel lets go when the writer dies."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # a shared lock taken here goes with the descriptor
    return False


def _root_alive(info: RunInfo) -> bool:
    st = procfs.read_stat(info.root_pid) if info.root_pid is not None else None
    if st is None or st.state in ("Z", "X"):
        return False
    if info.root_start is not None:
        return abs(procfs.boot_time() + st.starttime / procfs.CLK_TCK - info.root_start) <= _START_SLACK_S
    # No round recorded yet (its memscope died in its first interval): boot time to the sub-second, from
    # CLOCK_BOOTTIME, the clock starttime counts on.
    started = time.time() - procfs.uptime() + st.starttime / procfs.CLK_TCK
    return info.t0_epoch is not None and started <= info.t0_epoch + _T0_SLACK_S


# The record's own files, beside <name>.sqlite: SQLite's (the write-ahead log, its index, a rollback journal).
_SQLITE_SIDE = ("-wal", "-shm", "-journal")
# What memscope writes beside a record it named <run_id>.sqlite: the captured output while a capture-mode run goes,
# the CUDA snapshots it kept (collect.gpu.keep_snapshot: <run_id>.cuda_snapshot_<pid>_<n>.pickle).
_RUN_SIDE = re.compile(r"\.(?:stdout|stderr|cuda_snapshot_\d+_\d+\.pickle)")


def record_files(info: RunInfo) -> list[str]:
    """The files memscope wrote for this record, by the exact names it gives them: the record and SQLite's files
    beside it (``<name>.sqlite-wal``, ``-shm``, ``-journal``); when the record still has the name memscope gave it
    (``<run_id>.sqlite``), the run's files named after its id (captured output, kept CUDA snapshots) and its
    ``<run_id>-scalene`` folder when the record says the run had one. Nothing else: a record renamed ``best.sqlite``
    owns none of ``best.pt`` or ``best.d/``. Only regular files (and that one folder), never a symbolic link."""
    d = os.path.dirname(info.path) or "."
    name = os.path.basename(info.path)
    # By the file's name, not the id in its row: a record copied to another name keeps its id, and the files named
    # after that id are the original's, not the copy's.
    candidates = [name, *(name + side for side in _SQLITE_SIDE)]
    stem = name[: -len(".sqlite")] if name.endswith(".sqlite") else ""
    own_name = bool(stem) and stem == info.run_id
    if own_name:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            names = []
        candidates += [n for n in names if n.startswith(stem + ".") and _RUN_SIDE.fullmatch(n[len(stem) :])]
    out = []
    for n in candidates:
        p = os.path.join(d, n)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append(p)
    if own_name and info.scalene:
        p = os.path.join(d, f"{info.run_id}-scalene")
        try:
            if stat.S_ISDIR(os.lstat(p).st_mode):
                out.append(p)
        except OSError:
            pass
    return out


def files_size(paths: list[str]) -> int:
    """Bytes on disk of these files (folders walked, links not followed)."""
    total = 0
    for p in paths:
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                for root, _dirs, files in os.walk(p):
                    for f in files:
                        fp = os.path.join(root, f)
                        if not os.path.islink(fp):
                            total += os.lstat(fp).st_size
            else:
                total += os.lstat(p).st_size
        except OSError:
            continue
    return total


def run_age_s(info: RunInfo, now: float | None = None) -> float | None:
    """Seconds since the run started; None if the record does not say when."""
    started = _started(info)[0]
    return None if not started else (time.time() if now is None else now) - started
