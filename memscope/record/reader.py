"""The one reader of a run's record: every SQL query memscope runs on a record lives in this module.

A record is read while it is written (WAL) and long after: the schema below only ever gains columns, and a
record written by an older memscope opens with this reader (``has_fast`` tells what it lacks).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Iterable, Iterator

from ..model import KIND_PSS, KIND_RSS

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
CREATE INDEX IF NOT EXISTS host_t ON host (t);
CREATE TABLE IF NOT EXISTS peaks (pid INTEGER, col TEXT, value INTEGER, t REAL, PRIMARY KEY (pid, col));
CREATE TABLE IF NOT EXISTS tiers (age REAL, step REAL);
"""
# peaks: each process's highest rss, pss (PSS rounds) and est (the fast series: est_pss, else pss) with its time,
# kept by the writer as it inserts; the rounds that held them may be dropped by the downsampling (buckets.py),
# whose tiers (rounds older than ``age`` s reduced to buckets of ``step`` s) are in ``tiers``.


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    """A connection to a record: read-only, or WAL with synchronous=FULL for the writer."""
    if readonly:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5, check_same_thread=False)
    else:
        con = sqlite3.connect(path, timeout=5, check_same_thread=False)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
    return con


# -- reading a run back --------------------------------------------------------------------------------------
class RunData:
    """Read access to one run's record (finished or still being written)."""

    def __init__(self, path: str, con: sqlite3.Connection | None = None) -> None:
        self.path = path
        self.con = con if con is not None else connect(path, readonly=True)
        cols = {r[1] for r in self.con.execute("PRAGMA table_info(samples)")}
        # Records written before the fast series existed have no per-round PSS estimate.
        self.has_fast = "est_pss" in cols
        # Records written before the downsampling have every round and no peaks table.
        self.has_peaks = "peaks" in self._tables()
        self._events: dict[str, list[dict[str, Any]]] | None = None  # see hold_events

    def close(self) -> None:
        """Close the record."""
        self.con.close()

    def run_row(self) -> dict[str, Any]:
        """The run's row: id, command, cwd, times, root pid, exit cause, summary, meta (JSON decoded)."""
        cur = self.con.execute(
            "SELECT id, command, cwd, started_at, t0_epoch, root_pid, ended_at, duration_s, "
            "exit_cause, summary, meta FROM run"
        )
        row = cur.fetchone()
        if row is None:
            raise ValueError(f"{self.path} holds no run")
        keys = [d[0] for d in cur.description]
        d = dict(zip(keys, row))
        d["command"] = _json_or(d["command"], [])
        d["meta"] = _json_or(d["meta"], {})
        d["summary"] = _json_or(d["summary"], None)
        return d

    def process_create_time(self, pid: int) -> float | None:
        """When the record saw ``pid`` start (epoch seconds), from its first row; None if not seen yet."""
        row = self.con.execute(
            "SELECT create_time FROM processes WHERE pid=? ORDER BY first_t LIMIT 1", (pid,)
        ).fetchone()
        return row[0] if row and isinstance(row[0], (int, float)) else None

    def processes(self) -> list[dict[str, Any]]:
        """Every process of the tree, in the order they were seen."""
        cur = self.con.execute("SELECT * FROM processes ORDER BY first_t, pid")
        keys = [d[0] for d in cur.description]
        return [dict(zip(keys, r)) for r in cur]

    def peaks_by_pid(self) -> dict[int, tuple[int, int | None]]:
        """pid -> (peak RSS, peak PSS); PSS at every round where the record has the fast series. Exact on a
        downsampled record: the max of the rounds kept and of the writer's ``peaks`` table."""
        # A process whose PSS was never readable (another user's) has no PSS peak, only RSS rounds' guesses.
        if self.has_peaks:
            # Written with every round (and refreshed by memory_copy for what the file refused): the whole story,
            # without a pass over every sample sorted by pid.
            sql = (
                "SELECT pid, MAX(CASE WHEN col='rss' THEN value END), MAX(CASE WHEN col='pss' THEN value END), "
                "MAX(CASE WHEN col='est' THEN value END) FROM peaks GROUP BY pid"
            )
        else:
            est = "MAX(COALESCE(est_pss, pss))" if self.has_fast else "MAX(pss)"
            sql = f"SELECT pid, MAX(rss), MAX(pss), {est} FROM samples GROUP BY pid"
        out: dict[int, tuple[int, int | None]] = {}
        for pid, rss, pss, est in self.con.execute(sql):
            out[pid] = (rss or 0, None if pss is None else est)
        return out

    def fit_window(self) -> float:
        """The bucket the leak fit reads the record's floors at: the coarsest the downsampling has reached, so
        that every part of the run, downsampled or not yet, gives one floor point per bucket (its lowest round,
        which every bucket keeps); 0 (every round) for a record not downsampled."""
        if not self.has_peaks or "tiers" not in self._tables():
            return 0.0
        row = self.con.execute(
            "SELECT (SELECT MIN(t) FROM samples WHERE kind=0), (SELECT MAX(t) FROM samples WHERE kind=0)"
        ).fetchone()
        if not row or row[0] is None:
            return 0.0
        span = row[1] - row[0]
        steps = [step for age, step in self.con.execute("SELECT age, step FROM tiers") if span > age and step > 0]
        return float(max(steps, default=0.0))

    def process_peaks(self) -> dict[tuple[int, str], tuple[int, float]]:
        """(pid, "rss" | "pss" | "est") -> (peak, its t) as the writer kept them; empty for older records."""
        if not self.has_peaks:
            return {}
        return {(pid, col): (v, t) for pid, col, v, t in self.con.execute("SELECT pid, col, value, t FROM peaks")}

    def last_by_pid(self) -> dict[int, dict[str, Any]]:
        """Each process's last round with memory in it (RSS, private, PSS and swap of that one moment)."""
        if not self.has_fast:
            return {}
        out: dict[int, dict[str, Any]] = {}
        # SQLite takes the bare columns from the row that holds MAX(t).
        for pid, t, rss, private, pss in self.con.execute(
            "SELECT pid, MAX(t), rss, private, est_pss FROM samples WHERE kind=0 AND rss>0 GROUP BY pid"
        ):
            out[pid] = {"t": t, "rss": rss, "private": private, "pss": pss}
        for pid, t, swap in self.con.execute(
            "SELECT pid, MAX(t), swap FROM samples WHERE kind=1 AND pss IS NOT NULL GROUP BY pid"
        ):
            if pid in out:
                out[pid].update(pss_t=t, swap=swap)
        return out

    def tree_totals(self, kind: int, private: bool = False) -> Iterator[tuple[float, int]]:
        """(t, sum over the tree) per round; for PSS rounds the sum of PSS, for RSS rounds the sum of RSS.
        ``private`` (PSS rounds): anonymous PSS plus swap, without the file-backed pages that move with what
        other processes map."""
        col = _column(kind, private)
        yield from self.con.execute(f"SELECT t, SUM({col}) FROM samples WHERE kind=? GROUP BY t ORDER BY t", (kind,))

    def role_totals(self, kind: int, private: bool = False) -> dict[str, tuple[list[float], list[float]]]:
        """Per role, (t, sum over that role's processes) per round."""
        return self._by_role(kind, _column(kind, private))

    def fast_totals(self, private: bool = False, floor_s: float = 0.0) -> list[tuple[float, int]]:
        """The tree's PSS (or, with ``private``, its anonymous PSS + swap) at every RSS round: the fast series
        (measured in PSS rounds, carried forward between them). Empty for records without it. ``floor_s``: only
        the lowest round of each ``floor_s`` bucket (``fit_window``)."""
        if not self.has_fast:
            return []
        col = "est_private" if private else "est_pss"
        sql = f"SELECT t, SUM({col}) AS v FROM samples WHERE kind=0 GROUP BY t ORDER BY t"
        if floor_s > 0:  # SQLite takes the bare t from the row that holds MIN(v)
            sql = f"SELECT t, MIN(v) FROM ({sql}) GROUP BY CAST(t / {float(floor_s)!r} AS INTEGER) ORDER BY t"
        return self.con.execute(sql).fetchall()

    def role_fast_totals(
        self, private: bool = False, column: str | None = None, floor_s: float = 0.0
    ) -> dict[str, tuple[list[float], list[float]]]:
        """Per role, (t, sum of the fast series over that role's processes) at every RSS round. ``column``
        "private" gives the raw statm private memory instead (not proportional: copy-on-write pages count in
        every process that maps them, so a parent's own growth stays its own). ``floor_s``: only the lowest round
        of each ``floor_s`` bucket, per role."""
        if not self.has_fast:
            return {}
        return self._by_role(KIND_RSS, column or ("est_private" if private else "est_pss"), floor_s)

    def role_fast_total(
        self, role: str, column: str = "est_pss", floor_s: float = 0.0
    ) -> tuple[list[float], list[float]] | None:
        """``role_fast_totals(column=..., floor_s=...)[role]``, for one role: its processes' rows only (no per-row
        join and no sums for the other roles; a week's record is 800,000 rows). None where it has no round."""
        if not self.has_fast or column not in ("est_pss", "est_private", "private", "rss"):
            return None
        pids = [p for (p,) in self.con.execute("SELECT pid FROM processes WHERE COALESCE(role, 'other')=?", (role,))]
        if not pids:
            return None
        ts: list[float] = []
        ys: list[float] = []
        key = None
        marks = ",".join("?" * len(pids))
        for t, v in self.con.execute(
            f"SELECT t, SUM(COALESCE({column}, 0)) FROM samples WHERE kind=0 AND pid IN ({marks}) GROUP BY t ORDER BY t",
            pids,
        ):
            if floor_s > 0:
                k = int(t / floor_s)
                if key == k:
                    if v < ys[-1]:
                        ts[-1], ys[-1] = t, v
                    continue
                key = k
            ts.append(t)
            ys.append(v)
        return (ts, ys) if ts else None

    def _by_role(self, kind: int, col: str, floor_s: float = 0.0) -> dict[str, tuple[list[float], list[float]]]:
        """Per role, (t, sum of ``col`` over its processes) at each round of ``kind`` where it had one. One pass
        in time order (the samples index), a column per role: grouping by round and role made SQLite sort every
        sample. With ``floor_s``, each bucket's lowest round only."""
        roles = [r for (r,) in self.con.execute("SELECT DISTINCT COALESCE(role, 'other') FROM processes")]
        if "other" not in roles:
            roles.append("other")  # samples of a pid the processes table lacks
        sums = ", ".join(f"SUM(CASE WHEN COALESCE(p.role, 'other')=? THEN COALESCE({col}, 0) END)" for _ in roles)
        series: list[tuple[list[float], list[float]]] = [([], []) for _ in roles]
        keys: list[int | None] = [None] * len(roles)
        for t, *vals in self.con.execute(
            f"SELECT s.t, {sums} FROM samples s LEFT JOIN processes p ON p.pid = s.pid WHERE s.kind=? "
            "GROUP BY s.t ORDER BY s.t",
            (*roles, kind),
        ):
            for k, v in enumerate(vals):
                if v is None:
                    continue  # none of this role's processes in this round
                ts, ys = series[k]
                if floor_s > 0:
                    key = int(t / floor_s)
                    if keys[k] == key:
                        if v < ys[-1]:
                            ts[-1], ys[-1] = t, v
                        continue
                    keys[k] = key
                ts.append(t)
                ys.append(v)
        return {r: s for r, s in zip(roles, series) if s[0]}

    def role_rounds(self, role: str) -> Iterator[tuple[float, int, int | None, int | None]]:
        """(t, processes alive, their PSS, their RSS) at each fast round where ``role`` had a process: one pass
        for ``role_peak_round`` and ``role_alive_counts`` together."""
        yield from self.con.execute(
            "SELECT s.t, COUNT(*), SUM(s.est_pss), SUM(s.rss) FROM samples s JOIN processes p ON p.pid = s.pid "
            "WHERE s.kind=0 AND p.role=? GROUP BY s.t ORDER BY s.t",
            (role,),
        )

    def process_fast_floors(self, bucket_s: float) -> dict[int, tuple[str, list[float], list[float]]]:
        """Per process: (its role, t, the least of its fast private series, anonymous PSS + swap, in each
        ``bucket_s`` of its life). The floor is all a leak fit reads (it keeps chunk minima), and a day at 10 Hz
        is 14 M rows: SQLite reduces them."""
        out: dict[int, tuple[str, list[float], list[float]]] = {}
        if not self.has_fast:
            return out
        for pid, role, t, v in self.con.execute(
            "SELECT s.pid, COALESCE(p.role, 'other'), MIN(s.t), MIN(s.est_private) FROM samples s "
            "LEFT JOIN processes p ON p.pid = s.pid WHERE s.kind=0 AND s.est_private IS NOT NULL "
            "GROUP BY s.pid, CAST(s.t / ? AS INTEGER) ORDER BY s.pid, 3",
            (bucket_s,),
        ):
            _, ts, ys = out.setdefault(pid, (role, [], []))
            ts.append(t)
            ys.append(v)
        return out

    def alive_counts(self, bucket_s: float) -> list[tuple[float, int]]:
        """(t, the most processes alive at one round) per ``bucket_s``: what the growth kind "more processes"
        is told from (a zombie's round reads 0 and is not counted). Empty for records without the fast series."""
        if not self.has_fast:
            return []
        sql = (
            "SELECT MIN(t), MAX(n) FROM (SELECT t, COUNT(*) AS n FROM samples WHERE kind=0 AND rss>0 GROUP BY t) "
            "GROUP BY CAST(t / ? AS INTEGER) ORDER BY 1"
        )
        return [(float(t), int(n)) for t, n in self.con.execute(sql, (max(bucket_s, 1e-3),))]

    def fast_highs(self, bucket_s: float) -> list[tuple[float, int]]:
        """(t, the tree's highest fast PSS) per ``bucket_s``: the spikes a live verdict names, read without every
        round of a long record."""
        if not self.has_fast:
            return []
        sql = (
            "SELECT t, MAX(v) FROM (SELECT t, SUM(est_pss) AS v FROM samples WHERE kind=0 GROUP BY t) "
            "GROUP BY CAST(t / ? AS INTEGER) ORDER BY t"
        )
        return [(float(t), int(v or 0)) for t, v in self.con.execute(sql, (max(bucket_s, 1e-3),))]

    def pss_rounds_by_pid(
        self, until_s: float | None = None, points: int = 600
    ) -> dict[int, list[tuple[float, int, int, int | None, int | None]]]:
        """Per process: (t, RSS, PSS, anonymous PSS, anon RSS) of its PSS rounds up to ``until_s``, in time order;
        at most about ``points`` rounds a process (the last round of each equal slice of the span: a day's record
        is millions of rows, and what reads this wants the trend, not every round)."""
        until = float("inf") if until_s is None else float(until_s)
        row = self.con.execute(
            "SELECT MIN(t), MAX(t) FROM samples WHERE kind=? AND t<=?", (KIND_PSS, min(until, 1e300))
        ).fetchone()
        out: dict[int, list[tuple[float, int, int, int | None, int | None]]] = {}
        if not row or row[0] is None:
            return out
        bucket = (row[1] - row[0]) / max(1, points)
        sql = "SELECT t, pid, rss, pss, anon, private FROM samples WHERE kind=? AND t<=? AND pss IS NOT NULL"
        if bucket > 0:  # SQLite takes the bare columns from the row that holds MAX(t)
            sql = (
                "SELECT MAX(t), pid, rss, pss, anon, private FROM samples WHERE kind=? AND t<=? AND pss IS NOT NULL "
                f"GROUP BY pid, CAST(t / {float(bucket)!r} AS INTEGER)"
            )
        for t, pid, rss, pss, anon, private in self.con.execute(sql, (KIND_PSS, min(until, 1e300))):
            out.setdefault(pid, []).append((t, rss or 0, pss, anon, private))
        for rows in out.values():
            rows.sort()
        return out

    def fast_peak(self) -> tuple[float, int] | None:
        """(t, tree PSS) at the fast series' peak, None for records without it."""
        if not self.has_fast:
            return None
        row = self.con.execute(
            "SELECT t, SUM(est_pss) AS s FROM samples WHERE kind=0 GROUP BY t ORDER BY s DESC LIMIT 1"
        ).fetchone()
        return (row[0], row[1]) if row and row[1] is not None else None

    def tree_peak(self, kind: int) -> tuple[float, int] | None:
        """(t, tree total) at the peak of the rounds of ``kind``, None when there are none."""
        col = "pss" if kind == KIND_PSS else "rss"
        row = self.con.execute(
            f"SELECT t, SUM({col}) AS s FROM samples WHERE kind=? GROUP BY t ORDER BY s DESC LIMIT 1", (kind,)
        ).fetchone()
        return (row[0], row[1]) if row and row[1] is not None else None

    def last_tree_total(self) -> tuple[float, int] | None:
        """(t, tree RSS) at the last RSS round, None when there is none."""
        row = self.con.execute(
            "SELECT t, SUM(rss) FROM samples WHERE kind=0 AND t=(SELECT MAX(t) FROM samples WHERE kind=0 AND rss>0)"
        ).fetchone()
        return (row[0], row[1]) if row and row[0] is not None else None

    def host_rows(self) -> list[tuple[Any, ...]]:
        """Every host sample, in time order, as stored."""
        return self.con.execute(
            "SELECT t, total, available, swap_total, swap_used, lim, cgroup_usage, host_oom, "
            "cgroup_oom FROM host ORDER BY t"
        ).fetchall()

    def _tables(self) -> set[str]:
        return {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def tables_missing(self) -> set[str]:
        """The memscope tables this file lacks (all five: not a memscope record)."""
        return {"run", "processes", "samples", "host", "events"} - self._tables()

    def stored_summary(self) -> Any:
        """The summary written at the run's end as stored (None when missing or damaged: not JSON)."""
        stored = self.con.execute("SELECT summary FROM run").fetchone()
        try:
            return json.loads(stored[0]) if stored and stored[0] else None
        except ValueError:
            return None  # damaged at the end: the data before it still tells

    def last_sample_t(self) -> float | None:
        """The time of the record's last sampling round, None when it has none."""
        row = self.con.execute(  # per kind: the (kind, t) index answers each at once
            "SELECT MAX(m) FROM (SELECT MAX(t) AS m FROM samples WHERE kind=0 UNION ALL "
            "SELECT MAX(t) FROM samples WHERE kind=1)"
        ).fetchone()
        return row[0] if row and row[0] is not None else None

    def role_peak_round(self, role: str) -> tuple[float, int, int, int] | None:
        """(t, processes alive, their PSS, their RSS) at the fast round where ``role``'s processes held most."""
        row: tuple[float, int, int, int] | None = self.con.execute(
            "SELECT s.t, COUNT(*) AS n, SUM(s.est_pss), SUM(s.rss) FROM samples s JOIN processes p ON p.pid = s.pid "
            "WHERE s.kind=0 AND p.role=? GROUP BY s.t ORDER BY SUM(s.est_pss) DESC LIMIT 1",
            (role,),
        ).fetchone()
        return row

    def role_count(self, role: str) -> int:
        """How many processes of ``role`` the run ever had."""
        count: int = self.con.execute("SELECT COUNT(*) FROM processes WHERE role=?", (role,)).fetchone()[0]
        return count

    def role_alive_counts(self, role: str) -> Iterator[int]:
        """How many processes of ``role`` each fast round saw."""
        for (n,) in self.con.execute(
            "SELECT COUNT(*) FROM samples s JOIN processes p ON p.pid = s.pid WHERE s.kind=0 AND p.role=? GROUP BY s.t",
            (role,),
        ):
            yield n

    def output_data(self) -> Iterator[str]:
        """The raw ``data`` of the record's output events, in order."""
        for (data,) in self.con.execute("SELECT data FROM events WHERE kind='output' ORDER BY t, rowid"):
            yield data

    def process_exits(self) -> Iterator[tuple[int, str | None, float | None]]:
        """(pid, role, exit_t) of every process, in no order."""
        yield from self.con.execute("SELECT pid, role, exit_t FROM processes")

    def sample_rows(self, kind: int, column: str) -> Iterable[tuple[float, int, int | None]]:
        """(t, pid, ``column``) of every sample of ``kind``, by time; ``column`` is rss, est_pss or pss."""
        if column not in ("rss", "est_pss", "pss"):
            raise ValueError(column)
        return self.con.execute(f"SELECT t, pid, {column} FROM samples WHERE kind=? ORDER BY t", (kind,))

    def role_sums(self, kind: int, columns: tuple[str, ...], totals: tuple[str, ...] = ()) -> tuple[list[str], Any]:
        """The charts' series in one pass: (roles, rows), a row per round of ``kind`` by time: t, then for each
        of ``columns`` the sum over each role's processes (None where none of them was in that round; a process
        without a role is "other"), then the tree's sum of each of ``totals``. Summed by SQLite in time order:
        a row a round, not one per process."""
        allowed = ("rss", "est_pss", "pss", "est_private")
        if any(c not in allowed for c in (*columns, *totals)):
            raise ValueError(columns, totals)
        roles = [r for (r,) in self.con.execute("SELECT DISTINCT COALESCE(role, 'other') FROM processes")]
        if "other" not in roles:
            roles.append("other")  # samples of a pid the processes table lacks
        sums = [
            f"SUM(CASE WHEN COALESCE(p.role, 'other')=? THEN COALESCE(s.{c}, 0) END)" for c in columns for _ in roles
        ]
        sums += [f"SUM(s.{c})" for c in totals]
        return roles, self.con.execute(
            f"SELECT s.t, {', '.join(sums)} FROM samples s LEFT JOIN processes p ON p.pid = s.pid WHERE s.kind=? "
            "GROUP BY s.t ORDER BY s.t",
            (*roles * len(columns), kind),
        )

    def host_available(self) -> Iterable[tuple[float, int, int | None]]:
        """(t, available, limit) of every host sample, by time."""
        return self.con.execute("SELECT t, available, lim FROM host ORDER BY t")

    def last_events(self, n: int) -> list[tuple[float, int | None, str, str]]:
        """The latest ``n`` events other than output, newest first, as stored (data is JSON text)."""
        return self.con.execute(
            "SELECT t, pid, kind, data FROM events WHERE kind != 'output' ORDER BY t DESC LIMIT ?", (n,)
        ).fetchall()

    def ended(self) -> bool:
        """Whether the run's end was recorded."""
        row = self.con.execute("SELECT ended_at FROM run").fetchone()
        return bool(row and row[0])

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The events (of ``kind``, or all), in time order, their data decoded. An event whose data is not a JSON
        object (damaged, or valid JSON of another shape: a list, a number) is left out: every reader of events
        takes their data as an object, and one such event made `report` and `ls` fail for the whole record."""
        if kind and kind != "output" and self._events is not None:
            return [{**e, "data": dict(e["data"])} for e in self._events.get(kind, ())]  # the caller's own
        sql, args = "SELECT t, pid, kind, data FROM events", tuple[str, ...]()
        if kind:
            sql, args = sql + " WHERE kind=?", (kind,)
        return _decoded(self.con.execute(sql + " ORDER BY t", args))

    def hold_events(self, on: bool = True) -> None:
        """Read every event but program output once and answer ``events(kind)`` from that until
        ``hold_events(False)``: the summary asks for some 30 kinds, and each was a scan of a table where a
        week's program output is 60,000 rows. Only for a reading that wants one moment of the record."""
        self._events = None
        if on:
            held: dict[str, list[dict[str, Any]]] = {}
            for e in _decoded(
                self.con.execute("SELECT t, pid, kind, data FROM events WHERE kind != 'output' ORDER BY t")
            ):
                held.setdefault(e["kind"], []).append(e)
            self._events = held


def _decoded(rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out = []
    for t, pid, k, d in rows:
        data = _json_or(d, {}) if isinstance(d, str) else None
        if data or d == "{}":
            out.append({"t": t, "pid": pid, "kind": k, "data": data})
    return out


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
