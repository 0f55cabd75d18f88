"""The record: one SQLite file per run, written by one thread, readable while it is written.

WAL mode with synchronous=FULL and a commit at least every ``flush_s``: if memscope, the kernel or the machine
dies, the file keeps everything up to the last commit and opens cleanly.
"""
from __future__ import annotations

import collections
import json
import os
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from .fmt import stderr_line
from .model import KIND_PSS, KIND_RSS, Event, HostSample, ProcessExited, ProcessSeen, Record, RunEnded, TreeSample

SCHEMA = """
CREATE TABLE IF NOT EXISTS run (id TEXT PRIMARY KEY, command TEXT, cwd TEXT, started_at TEXT, t0_epoch REAL,
  root_pid INTEGER, ended_at TEXT, duration_s REAL, exit_cause TEXT, summary TEXT, meta TEXT);
CREATE TABLE IF NOT EXISTS processes (pid INTEGER PRIMARY KEY, ppid INTEGER, role TEXT, name TEXT, cmdline TEXT,
  create_time REAL, first_t REAL, exit_t REAL, exit_code INTEGER, exit_signal TEXT);
CREATE TABLE IF NOT EXISTS samples (t REAL, kind INTEGER, pid INTEGER, rss INTEGER, pss INTEGER, anon INTEGER,
  file INTEGER, swap INTEGER, private INTEGER, est_pss INTEGER, est_private INTEGER);
CREATE INDEX IF NOT EXISTS samples_t ON samples (kind, t);
CREATE TABLE IF NOT EXISTS host (t REAL, total INTEGER, available INTEGER, swap_total INTEGER, swap_used INTEGER,
  lim INTEGER, cgroup_usage INTEGER, host_oom INTEGER, cgroup_oom INTEGER);
CREATE TABLE IF NOT EXISTS events (t REAL, pid INTEGER, kind TEXT, data TEXT);
"""


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5, check_same_thread=False)
    else:
        con = sqlite3.connect(path, timeout=5, check_same_thread=False)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
    return con


class _Sql:
    """A statement of the recorder's own (the run row). Private: no Record, nothing from outside, can be one."""
    __slots__ = ("sql", "args")

    def __init__(self, sql: str, args: tuple) -> None:
        self.sql, self.args = sql, args


class _Barrier:
    """Commit what came before, then set ``done``."""
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


_CLOSE = object()
_RECORDS = (TreeSample, HostSample, ProcessSeen, ProcessExited, Event, RunEnded)
# Kept in memory once the file refuses records (a full disk), for the summary: every record but samples (few:
# processes, host rounds, events) up to KEEP_LOST, the latest KEEP_SAMPLES sample rounds (about 20 MB at most)
# and each kind's highest round, so the peak stays true.
KEEP_LOST = 100_000
KEEP_SAMPLES = 20_000


class Recorder:
    """Owns the run's SQLite file. ``put`` is cheap and thread-safe; a writer thread batches the inserts.

    The writer survives any record: one it cannot store (a bad value) is counted in ``bad_records`` and skipped;
    when the file itself refuses (a full disk, an I/O error) the batch is kept in memory (``lost``, bounded),
    counted in ``lost_records``, and said once on stderr. ``memory_copy`` then gives the record as memscope
    knows it, so the summary stays true.
    """

    def __init__(self, path: str, flush_s: float = 0.5, warn: Any = None) -> None:
        self.path = path
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._flush_s = flush_s
        self._con = connect(path)
        self._con.executescript(SCHEMA)
        self._con.commit()
        self._warn = warn if warn is not None else stderr_line
        self.bad_records = 0
        self.lost_records = 0
        self.first_error: str | None = None
        self.lost: list[Any] = []      # what the file refused but sample rounds, oldest first (at most KEEP_LOST)
        self._lost_samples: collections.deque[TreeSample] = collections.deque(maxlen=KEEP_SAMPLES)
        self._lost_peaks: dict[str, tuple[int, TreeSample]] = {}  # kind -> (tree total, its round)
        self._batch: list[Any] = []    # written since the last commit: lost with it if the commit fails
        self._lost_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="memscope-recorder", daemon=True)
        self._thread.start()

    @property
    def errors(self) -> int:
        return self.bad_records + self.lost_records

    def health(self) -> dict[str, Any]:
        """What went wrong while recording, for the summary (all zero when nothing did)."""
        return {"bad_records": self.bad_records, "lost_records": self.lost_records, "first_error": self.first_error}

    def begin(self, run_id: str, command: list[str], cwd: str, started_at: str, t0_epoch: float,
              root_pid: int, meta: dict[str, Any]) -> None:
        self._q.put(_Sql("INSERT OR REPLACE INTO run (id, command, cwd, started_at, t0_epoch, root_pid, meta) "
                         "VALUES (?,?,?,?,?,?,?)",
                         (run_id, json.dumps(command), cwd, started_at, t0_epoch, root_pid, json.dumps(meta))))

    def put(self, rec: Record) -> None:
        if not isinstance(rec, _RECORDS):
            raise TypeError(f"not a record: {type(rec).__name__}")
        self._q.put(rec)

    def sync(self, timeout: float = 5.0) -> bool:
        """Wait until everything put so far is committed (or refused); False on timeout."""
        b = _Barrier()
        self._q.put(b)
        return b.done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        self._q.put(_CLOSE)
        self._thread.join(timeout)

    def memory_copy(self) -> sqlite3.Connection:
        """The record in memory, with what the file refused added back: call after ``sync``."""
        mem = sqlite3.connect(":memory:", check_same_thread=False)
        src = connect(self.path, readonly=True)
        try:
            src.backup(mem)
        finally:
            src.close()
        mem.executescript(SCHEMA)
        with self._lost_lock:
            lost = list(self.lost) + sorted({id(r): r for r in [*self._lost_samples, *(
                r for _, r in self._lost_peaks.values())]}.values(), key=lambda r: r.t)
        for rec in lost:
            try:
                _apply(mem, rec)
            except Exception:
                pass
        mem.commit()
        return mem

    def _loop(self) -> None:
        last = time.monotonic()
        while True:
            try:
                rec = self._q.get(timeout=self._flush_s)
            except queue.Empty:
                rec = None
            if rec is _CLOSE:
                self._commit()
                try:
                    self._con.close()
                except sqlite3.Error:
                    pass
                return
            if isinstance(rec, _Barrier):
                self._commit()
                last = time.monotonic()
                rec.done.set()
                continue
            if rec is not None:
                self._write_one(rec)
            if self._batch and (time.monotonic() - last >= self._flush_s or rec is None):
                self._commit()
                last = time.monotonic()

    def _write_one(self, rec: Any) -> None:
        try:
            _apply(self._con, rec)
        except sqlite3.OperationalError as exc:  # the file refuses: full disk, I/O error, locked for good
            self._refused(exc, [rec])
            return
        except Exception as exc:  # this record cannot be stored (a value out of range): skip it alone
            self.bad_records += 1
            self.first_error = self.first_error or f"a record could not be stored: {exc!r}"[:300]
            return
        self._batch.append(rec)

    def _commit(self) -> None:
        if not self._batch and not self._con.in_transaction:
            return
        try:
            self._con.commit()
        except sqlite3.Error as exc:
            self._refused(exc, [])
            return
        self._batch.clear()

    def _refused(self, exc: Exception, also: list[Any]) -> None:
        try:
            self._con.rollback()
        except sqlite3.Error:
            pass
        lost = self._batch + also
        self._batch = []
        first = self.lost_records == 0
        self.lost_records += len(lost)
        with self._lost_lock:
            for rec in lost:
                if isinstance(rec, TreeSample):
                    self._lost_samples.append(rec)
                    total = sum((p.pss if rec.kind == "pss" else p.rss) or 0 for p in rec.procs)
                    if total >= self._lost_peaks.get(rec.kind, (-1, rec))[0]:
                        self._lost_peaks[rec.kind] = (total, rec)
                elif len(self.lost) < KEEP_LOST:
                    self.lost.append(rec)
        if first:
            self.first_error = self.first_error or str(exc)
            self._warn(f"memscope: cannot write the record {self.path} ({exc}); what follows is kept in memory "
                       "for the summary, not in the file")

def _apply(c: sqlite3.Connection, rec: Any) -> None:
    """Write one record (or one of the recorder's own statements) on ``c``."""
    if isinstance(rec, _Sql):
        c.execute(rec.sql, rec.args)
    elif isinstance(rec, TreeSample):
        kind = KIND_RSS if rec.kind == "rss" else KIND_PSS
        c.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                      [(rec.t, kind, p.pid, p.rss, p.pss, p.anon, p.file, p.swap, p.private, p.est_pss,
                        p.est_private) for p in rec.procs])
    elif isinstance(rec, HostSample):
        c.execute("INSERT INTO host VALUES (?,?,?,?,?,?,?,?,?)",
                  (rec.t, rec.total, rec.available, rec.swap_total, rec.swap_used, rec.limit,
                   rec.cgroup_usage, rec.host_oom_kills, rec.cgroup_oom_kills))
    elif isinstance(rec, ProcessSeen):
        c.execute("INSERT INTO processes (pid, ppid, role, name, cmdline, create_time, first_t) "
                  "VALUES (?,?,?,?,?,?,?) ON CONFLICT(pid) DO UPDATE SET role=excluded.role, "
                  "name=excluded.name, cmdline=excluded.cmdline, ppid=excluded.ppid",
                  (rec.pid, rec.ppid, rec.role, rec.name, rec.cmdline, rec.create_time, rec.t))
    elif isinstance(rec, ProcessExited):
        c.execute("UPDATE processes SET exit_t=?, exit_code=COALESCE(?, exit_code), "
                  "exit_signal=COALESCE(?, exit_signal) WHERE pid=?",
                  (rec.t, rec.exit_code, rec.exit_signal, rec.pid))
    elif isinstance(rec, Event):
        # Every Event is data, whatever its kind: nothing in one is ever executed or acted on here.
        c.execute("INSERT INTO events VALUES (?,?,?,?)",
                  (rec.t, rec.pid, str(rec.kind), json.dumps(rec.data, default=repr)))
    elif isinstance(rec, RunEnded):
        s = rec.summary
        c.execute("UPDATE run SET ended_at=?, duration_s=?, exit_cause=?, summary=?",
                  (time.strftime("%Y-%m-%dT%H:%M:%S%z"), s.get("duration_s"), s["exit"]["cause"],
                   json.dumps(s)))


# -- reading a run back --------------------------------------------------------------------------------------
@dataclass
class RunInfo:
    run_id: str
    path: str
    command: list[str]
    started_at: str
    duration_s: float | None
    exit_cause: str | None
    peak_bytes: int | None


class RunData:
    """Read access to one run's record (finished or still being written)."""

    def __init__(self, path: str, con: sqlite3.Connection | None = None) -> None:
        self.path = path
        self.con = con if con is not None else connect(path, readonly=True)
        cols = {r[1] for r in self.con.execute("PRAGMA table_info(samples)")}
        # Records written before the fast series existed have no per-round PSS estimate.
        self.has_fast = "est_pss" in cols

    def close(self) -> None:
        self.con.close()

    def run_row(self) -> dict[str, Any]:
        cur = self.con.execute("SELECT id, command, cwd, started_at, t0_epoch, root_pid, ended_at, duration_s, "
                               "exit_cause, summary, meta FROM run")
        row = cur.fetchone()
        if row is None:
            raise ValueError(f"{self.path} holds no run")
        keys = [d[0] for d in cur.description]
        d = dict(zip(keys, row))
        d["command"] = _json_or(d["command"], [])
        d["meta"] = _json_or(d["meta"], {})
        d["summary"] = _json_or(d["summary"], None)
        return d

    def processes(self) -> list[dict[str, Any]]:
        cur = self.con.execute("SELECT * FROM processes ORDER BY first_t, pid")
        keys = [d[0] for d in cur.description]
        return [dict(zip(keys, r)) for r in cur]

    def peaks_by_pid(self) -> dict[int, tuple[int, int | None]]:
        """pid -> (peak RSS, peak PSS); PSS at every round where the record has the fast series."""
        # A process whose PSS was never readable (another user's) has no PSS peak, only RSS rounds' guesses.
        col = "CASE WHEN MAX(pss) IS NULL THEN NULL ELSE MAX(COALESCE(est_pss, pss)) END" if self.has_fast else \
            "MAX(pss)"
        out: dict[int, tuple[int, int | None]] = {}
        for pid, rss, pss in self.con.execute(f"SELECT pid, MAX(rss), {col} FROM samples GROUP BY pid"):
            out[pid] = (rss or 0, pss)
        return out

    def last_by_pid(self) -> dict[int, dict[str, Any]]:
        """Each process's last round with memory in it (RSS, private, PSS and swap of that one moment)."""
        if not self.has_fast:
            return {}
        out: dict[int, dict[str, Any]] = {}
        # SQLite takes the bare columns from the row that holds MAX(t).
        for pid, t, rss, private, pss in self.con.execute(
                "SELECT pid, MAX(t), rss, private, est_pss FROM samples WHERE kind=0 AND rss>0 GROUP BY pid"):
            out[pid] = {"t": t, "rss": rss, "private": private, "pss": pss}
        for pid, t, swap in self.con.execute(
                "SELECT pid, MAX(t), swap FROM samples WHERE kind=1 AND pss IS NOT NULL GROUP BY pid"):
            if pid in out:
                out[pid].update(pss_t=t, swap=swap)
        return out

    def tree_totals(self, kind: int, private: bool = False) -> Iterator[tuple[float, int]]:
        """(t, sum over the tree) per round; for PSS rounds the sum of PSS, for RSS rounds the sum of RSS.
        ``private`` (PSS rounds): anonymous PSS plus swap, without the file-backed pages that move with what
        other processes map."""
        col = _column(kind, private)
        yield from self.con.execute(f"SELECT t, SUM({col}) FROM samples WHERE kind=? GROUP BY t ORDER BY t",
                                    (kind,))

    def role_totals(self, kind: int, private: bool = False) -> dict[str, tuple[list[float], list[float]]]:
        """Per role, (t, sum over that role's processes) per round."""
        col = _column(kind, private)
        out: dict[str, tuple[list[float], list[float]]] = {}
        for t, role, v in self.con.execute(
                f"SELECT s.t, COALESCE(p.role, 'other'), SUM({col}) FROM samples s LEFT JOIN processes p "
                "ON p.pid = s.pid WHERE s.kind=? GROUP BY s.t, 2 ORDER BY s.t", (kind,)):
            ts, ys = out.setdefault(role, ([], []))
            ts.append(t)
            ys.append(v or 0)
        return out

    def fast_totals(self, private: bool = False) -> list[tuple[float, int]]:
        """The tree's PSS (or, with ``private``, its anonymous PSS + swap) at every RSS round: the fast series
        (measured in PSS rounds, carried forward between them). Empty for records without it."""
        if not self.has_fast:
            return []
        col = "est_private" if private else "est_pss"
        return self.con.execute(f"SELECT t, SUM({col}) FROM samples WHERE kind=0 GROUP BY t ORDER BY t").fetchall()

    def role_fast_totals(self, private: bool = False,
                         column: str | None = None) -> dict[str, tuple[list[float], list[float]]]:
        """Per role, (t, sum of the fast series over that role's processes) at every RSS round. ``column``
        "private" gives the raw statm private memory instead (not proportional: copy-on-write pages count in
        every process that maps them, so a parent's own growth stays its own)."""
        col = column or ("est_private" if private else "est_pss")
        out: dict[str, tuple[list[float], list[float]]] = {}
        if not self.has_fast:
            return out
        for t, role, v in self.con.execute(
                f"SELECT s.t, COALESCE(p.role, 'other'), SUM(s.{col}) FROM samples s LEFT JOIN processes p "
                "ON p.pid = s.pid WHERE s.kind=0 GROUP BY s.t, 2 ORDER BY s.t"):
            ts, ys = out.setdefault(role, ([], []))
            ts.append(t)
            ys.append(v or 0)
        return out

    def fast_peak(self) -> tuple[float, int] | None:
        if not self.has_fast:
            return None
        row = self.con.execute("SELECT t, SUM(est_pss) AS s FROM samples WHERE kind=0 GROUP BY t "
                               "ORDER BY s DESC LIMIT 1").fetchone()
        return (row[0], row[1]) if row and row[1] is not None else None

    def tree_peak(self, kind: int) -> tuple[float, int] | None:
        col = "pss" if kind == KIND_PSS else "rss"
        row = self.con.execute(f"SELECT t, SUM({col}) AS s FROM samples WHERE kind=? GROUP BY t "
                               "ORDER BY s DESC LIMIT 1", (kind,)).fetchone()
        return (row[0], row[1]) if row and row[1] is not None else None

    def last_tree_total(self) -> tuple[float, int] | None:
        row = self.con.execute("SELECT t, SUM(rss) FROM samples WHERE kind=0 AND t=(SELECT MAX(t) FROM samples "
                               "WHERE kind=0 AND rss>0)").fetchone()
        return (row[0], row[1]) if row and row[0] is not None else None

    def host_rows(self) -> list[tuple]:
        return self.con.execute("SELECT t, total, available, swap_total, swap_used, lim, cgroup_usage, host_oom, "
                                "cgroup_oom FROM host ORDER BY t").fetchall()

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT t, pid, kind, data FROM events", ()
        if kind:
            sql, args = sql + " WHERE kind=?", (kind,)
        return [{"t": t, "pid": pid, "kind": k, "data": json.loads(d)}
                for t, pid, k, d in self.con.execute(sql + " ORDER BY t", args)]


def _json_or(text: str | None, default: Any) -> Any:
    """A JSON column, or ``default`` when it is empty or damaged (a record is read as far as it can be)."""
    if not text:
        return default
    try:
        v = json.loads(text)
    except (ValueError, TypeError):
        return default
    return v if default is None or isinstance(v, type(default)) else default


def _column(kind: int, private: bool) -> str:
    if kind != KIND_PSS:
        return "rss"
    return "COALESCE(anon, pss) + COALESCE(swap, 0)" if private else "pss"


def read_summary(path: str) -> dict[str, Any]:
    """A record's summary: the one stored at its end, else computed from its data (a record whose summary is
    missing or not JSON). Raises sqlite3.Error or ValueError when the file is not a memscope record."""
    from .analysis.summary import summarize

    rd = RunData(path)
    try:
        tables = {r[0] for r in rd.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = {"run", "processes", "samples", "host", "events"} - tables
        if missing:
            raise ValueError(f"no {', '.join(sorted(missing))} table" if len(missing) < 5 else "no memscope tables")
        stored = rd.con.execute("SELECT summary FROM run").fetchone()
        try:
            summary = json.loads(stored[0]) if stored and stored[0] else None
        except ValueError:
            summary = None  # damaged at the end: the data before it still tells
        if not isinstance(summary, dict) or not isinstance(summary.get("exit"), dict) or "peak" not in summary:
            summary = summarize(rd)
        return summary
    finally:
        rd.close()


def default_record_dir() -> str:
    return os.path.join(os.getcwd(), ".memscope", "runs")


def list_runs(record_dir: str) -> list[RunInfo]:
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
        peak = (s.get("peak") or {})
        out.append(RunInfo(r["id"], path, r["command"], r["started_at"], r["duration_s"], r["exit_cause"],
                           peak.get("tree_pss_bytes") or peak.get("tree_rss_bytes")))
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


def record_health(recorder: Recorder, server: Any = None) -> dict[str, Any] | None:
    """The summary's ``record_errors``: what the record lacks and what the agents' socket refused; None if
    nothing went wrong."""
    out: dict[str, Any] = dict(recorder.health())
    if server is not None:
        st = server.stats()
        out.update(refused_messages=st["refused_messages"], rejected_connections=st["rejected_connections"],
                   last_refusal=st["last_refusal"])
    if not any(v for k, v in out.items() if k not in ("first_error", "last_refusal")):
        return None
    return out
