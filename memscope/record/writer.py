"""The record's writer: one SQLite file per run, written by one thread, readable while it is written.

WAL mode with synchronous=FULL and a commit at least every ``flush_s``: if memscope, the kernel or the machine
dies, the file keeps everything up to the last commit and opens cleanly. The schema is ``reader.SCHEMA``:
records written by any earlier memscope open with the same reader.

The file is created 0600 (SQLite gives its -wal and -shm the record's mode): command lines, output and stacks are
this user's only. The writer holds an exclusive ``flock`` on it from before its first byte until after its last
(the kernel drops it if memscope dies), so that ``prune`` and ``ls`` can tell a record still being written (its
run's root gone, leftovers being stopped, the summary being made) from one whose writer is gone.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import queue
import sqlite3
import threading
import time
from typing import Any

from ..fmt import stderr_line
from ..model import KIND_PSS, KIND_RSS, Event, HostSample, ProcessExited, ProcessSeen, Record, RunEnded, TreeSample
from ..redact import redact_argv, redact_fields
from . import buckets
from .reader import SCHEMA, connect


class _Sql:
    """A statement of the recorder's own (the run row). Private: no Record, nothing from outside, can be one."""

    __slots__ = ("sql", "args")

    def __init__(self, sql: str, args: tuple[Any, ...]) -> None:
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
RECORD_MODE = 0o600  # the record, its -wal and -shm: this user's only
# In the run row's meta: this record's writer held the lock (catalogue.WRITER_LOCK_META); records without it come
# from a memscope that held none.
LOCK_META = ("writer_lock", "flock")


class Recorder:
    """Owns the run's SQLite file. ``put`` is cheap and thread-safe; a writer thread batches the inserts.

    The writer survives any record: one it cannot store (a bad value) is counted in ``bad_records`` and skipped;
    when the file itself refuses (a full disk, an I/O error) the batch is kept in memory (``lost``, bounded),
    counted in ``lost_records``, and said once on stderr. ``memory_copy`` then gives the record as memscope
    knows it, so the summary stays true.
    """

    def __init__(
        self,
        path: str,
        flush_s: float = 0.5,
        warn: Any = None,
        tiers: tuple[tuple[float, float], ...] | None = buckets.TIERS,
    ) -> None:
        """``tiers``: the downsampling of old rounds (``buckets.TIERS``); None keeps every round."""
        self.path = path
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._flush_s = flush_s
        self._lock_fd, self.locked = _create_locked(path)
        try:
            self._con = connect(path)
        except BaseException:
            os.close(self._lock_fd)
            raise
        # One transaction: each statement on its own would be a commit, and each commit an fsync (synchronous=FULL)
        # that the run's start waits on.
        self._con.executescript(f"BEGIN;{SCHEMA}")
        if tiers:
            self._con.executemany("INSERT INTO tiers VALUES (?,?)", tiers)
        self._con.commit()
        self._warn = warn if warn is not None else stderr_line
        self.bad_records = 0
        self.lost_records = 0
        self.first_error: str | None = None
        self.lost: list[Any] = []  # what the file refused but sample rounds, oldest first (at most KEEP_LOST)
        self._lost_samples: collections.deque[TreeSample] = collections.deque(maxlen=KEEP_SAMPLES)
        self._lost_peaks: dict[str, tuple[int, TreeSample]] = {}  # kind -> (tree total, its round)
        self._batch: list[Any] = []  # written since the last commit: lost with it if the commit fails
        self._lost_lock = threading.Lock()
        self._closed = False
        self.after_close = 0  # records put once the file was closed: dropped (nothing would ever write them)
        self.compactor = buckets.Compactor(tiers) if tiers else None
        self._peaks: dict[tuple[int, str], int] = {}  # (pid, col) -> the highest value in the file
        self._thread = threading.Thread(target=self._loop, name="memscope-recorder", daemon=True)
        self._thread.start()

    @property
    def errors(self) -> int:
        """How many writes the file refused."""
        return self.bad_records + self.lost_records

    def health(self) -> dict[str, Any]:
        """What went wrong while recording, for the summary (all zero when nothing did)."""
        return {"bad_records": self.bad_records, "lost_records": self.lost_records, "first_error": self.first_error}

    def begin(
        self,
        run_id: str,
        command: list[str],
        cwd: str,
        started_at: str,
        t0_epoch: float,
        root_pid: int,
        meta: dict[str, Any],
    ) -> None:
        """Write the run's row (once, at the start); the command with its secrets replaced by *** (redact)."""
        self._q.put(
            _Sql(
                "INSERT OR REPLACE INTO run (id, command, cwd, started_at, t0_epoch, root_pid, meta) "
                "VALUES (?,?,?,?,?,?,?)",
                (
                    run_id,
                    json.dumps(redact_argv(command)),
                    cwd,
                    started_at,
                    t0_epoch,
                    root_pid,
                    json.dumps({**meta, LOCK_META[0]: LOCK_META[1]} if self.locked else meta),
                ),
            )
        )
        # Committed at once, not at the next flush: `memscope ls`, `report` and `stacks` find a run by this row,
        # and a person types them right after the start.
        self._q.put(_Barrier())

    def put(self, rec: Record) -> None:
        """Queue a record for the writer thread (never blocks the collectors)."""
        if not isinstance(rec, _RECORDS):
            raise TypeError(f"not a record: {type(rec).__name__}")
        if self._closed:  # the writer is gone: a queue nobody empties would only grow (issue 22 #6)
            self.after_close += 1
            return
        self._q.put(rec)

    def sync(self, timeout: float = 5.0) -> bool:
        """Wait until everything put so far is committed (or refused); False on timeout."""
        b = _Barrier()
        self._q.put(b)
        return b.done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, then close the file; what is put after this is dropped, counted."""
        self._closed = True
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
            lost = list(self.lost) + sorted(
                {id(r): r for r in [*self._lost_samples, *(r for _, r in self._lost_peaks.values())]}.values(),
                key=lambda r: r.t,
            )
        for rec in lost:
            try:
                _apply(mem, rec)
            except Exception:
                pass
        # The rounds the file refused are in samples now, not in peaks: peaks again from every round kept.
        for col, expr in (("rss", "rss"), ("pss", "pss"), ("est", "COALESCE(est_pss, pss)")):
            mem.execute(  # the bare t is that of the MAX row
                f"INSERT INTO peaks SELECT pid, '{col}', MAX({expr}), t FROM samples WHERE true GROUP BY pid "
                f"HAVING MAX({expr}) IS NOT NULL ON CONFLICT(pid, col) DO UPDATE SET value=excluded.value, "
                "t=excluded.t WHERE excluded.value > peaks.value"
            )
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
                os.close(self._lock_fd)  # after the last write: the record is whole from here on
                return
            if isinstance(rec, _Barrier):
                self._commit()
                last = time.monotonic()
                rec.done.set()
                continue
            if rec is not None:
                self._write_one(rec)
            if self.compactor is not None and self.compactor.due():
                self._commit()
                self._compact()
                last = time.monotonic()
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
        c = self.compactor
        if type(rec) is TreeSample:
            try:
                self._keep_peaks(rec)
            except sqlite3.OperationalError as exc:
                self._refused(exc, [])
                return
            if c is not None:
                c.saw_round(rec.t)
        elif c is not None and (
            type(rec) in (ProcessSeen, ProcessExited) or (type(rec) is Event and rec.kind in buckets.PROTECT_EVENTS)
        ):
            c.protect(rec.t)

    def _keep_peaks(self, rec: TreeSample) -> None:
        """Each process's highest rss, pss and est (est_pss, else pss) in the ``peaks`` table, in the same
        transaction as the round: the round itself may be dropped by the downsampling."""
        peaks = self._peaks
        rows = []
        for p in rec.procs:
            est = p.est_pss if p.est_pss is not None else p.pss
            for col, v in (("rss", p.rss), ("pss", p.pss), ("est", est)):
                if v is not None and v > peaks.get((p.pid, col), -1):
                    peaks[(p.pid, col)] = v
                    rows.append((p.pid, col, v, rec.t))
        if rows:
            self._con.executemany(
                "INSERT INTO peaks VALUES (?,?,?,?) ON CONFLICT(pid, col) DO UPDATE SET value=excluded.value, "
                "t=excluded.t WHERE excluded.value > peaks.value",
                rows,
            )

    def _compact(self) -> None:
        """One downsampling pass in its own transaction; on an error it is undone and tried again next time."""
        c = self.compactor
        assert c is not None
        state = c.save()
        try:
            c.run(self._con)
            self._con.commit()
        except sqlite3.Error as exc:
            c.restore(state)  # those buckets again next time
            try:
                self._con.rollback()
            except sqlite3.Error:
                pass
            self.first_error = self.first_error or f"downsampling the record failed: {exc!r}"[:300]

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
        self._peaks.clear()  # the rolled-back peaks are written again by the next rounds
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
            self._warn(
                f"memscope: cannot write the record {self.path} ({exc}); what follows is kept in memory "
                "for the summary, not in the file"
            )


def _create_locked(path: str) -> tuple[int, bool]:
    """Create the record (0600, never through a symbolic link) and take its lock: (the descriptor, whether the lock
    is held). A file system without locks (some network and FUSE mounts) records all the same, unlocked (its run
    row then says nothing of a lock, and prune keeps it until it has its end). OSError if the file cannot be made,
    or another writer holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, RECORD_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError:  # ENOLCK, EOPNOTSUPP, EINVAL: no locks here
        return fd, False
    return fd, True


def _apply(c: sqlite3.Connection, rec: Any) -> None:
    """Write one record (or one of the recorder's own statements) on ``c``."""
    if isinstance(rec, _Sql):
        c.execute(rec.sql, rec.args)
    elif isinstance(rec, TreeSample):
        kind = KIND_RSS if rec.kind == "rss" else KIND_PSS
        c.executemany(
            "INSERT INTO samples VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [
                (rec.t, kind, p.pid, p.rss, p.pss, p.anon, p.file, p.swap, p.private, p.est_pss, p.est_private)
                for p in rec.procs
            ],
        )
    elif isinstance(rec, HostSample):
        c.execute(
            "INSERT INTO host VALUES (?,?,?,?,?,?,?,?,?)",
            (
                rec.t,
                rec.total,
                rec.available,
                rec.swap_total,
                rec.swap_used,
                rec.limit,
                rec.cgroup_usage,
                rec.host_oom_kills,
                rec.cgroup_oom_kills,
            ),
        )
    elif isinstance(rec, ProcessSeen):
        c.execute(
            "INSERT INTO processes (pid, ppid, role, name, cmdline, create_time, first_t) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT(pid) DO UPDATE SET role=excluded.role, "
            "name=excluded.name, cmdline=excluded.cmdline, ppid=excluded.ppid",
            (rec.pid, rec.ppid, rec.role, rec.name, rec.cmdline, rec.create_time, rec.t),
        )
    elif isinstance(rec, ProcessExited):
        c.execute(
            "UPDATE processes SET exit_t=?, exit_code=COALESCE(?, exit_code), "
            "exit_signal=COALESCE(?, exit_signal) WHERE pid=?",
            (rec.t, rec.exit_code, rec.exit_signal, rec.pid),
        )
    elif isinstance(rec, Event):
        # Every Event is data, whatever its kind: nothing in one is ever executed or acted on here.
        # Command lines in it (an agent's argv, the leftovers' cmdline) with their secrets replaced by ***.
        data = rec.data if rec.kind == "output" else redact_fields(rec.data)
        c.execute(
            "INSERT INTO events VALUES (?,?,?,?)", (rec.t, rec.pid, str(rec.kind), json.dumps(data, default=repr))
        )
    elif isinstance(rec, RunEnded):
        s = rec.summary
        c.execute(
            "UPDATE run SET ended_at=?, duration_s=?, exit_cause=?, summary=?",
            (time.strftime("%Y-%m-%dT%H:%M:%S%z"), s.get("duration_s"), s["exit"]["cause"], json.dumps(s)),
        )


def record_health(recorder: Recorder, server: Any = None) -> dict[str, Any] | None:
    """The summary's ``record_errors``: what the record lacks and what the agents' socket refused; None if
    nothing went wrong."""
    out: dict[str, Any] = dict(recorder.health())
    if server is not None:
        st = server.stats()
        out.update(
            refused_messages=st["refused_messages"],
            rejected_connections=st["rejected_connections"],
            last_refusal=st["last_refusal"],
            over_budget_messages=st.get("over_budget_messages", 0),
        )
    if not any(v for k, v in out.items() if k not in ("first_error", "last_refusal")):
        return None
    return out
