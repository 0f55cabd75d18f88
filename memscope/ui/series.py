"""Bounded, spike-preserving chart series: the data model every view (notebook, HTML report, terminal) draws from.

A 24 h run sampled at 10 Hz is 864,000 rounds; a browser should never hold more than ~2,000 points per line. Each
series keeps, per time bucket, the sample with the smallest and the one with the largest value (each at its own
time), so that a one-sample spike is never averaged away. When the budget is reached the bucket width doubles and
neighbouring buckets merge, so memory stays O(max_points) for as long as a run lasts.

* ``MinMaxSeries``: one line.
* ``AlignedMinMax``: several lines on one shared time axis (for a stacked chart): per bucket it keeps the rounds
  that hold the min or the max of any column or of their sum, with every column's value at those rounds.
* ``RunSeries``: everything a memory chart needs, fed record by record (live through ``Run.subscribe``) or from
  a record file (``RunSeries.from_record``); ``snapshot()`` is JSON-able.
"""
from __future__ import annotations

import json
import math
import threading
from collections import deque
from typing import Any, Iterable

from ..model import ROLES, Event, HostSample, ProcessExited, ProcessSeen, RunEnded, TreeSample

__all__ = ["MinMaxSeries", "AlignedMinMax", "RunSeries"]

_EVENTS_KEPT = 200
_EVENT_STR_MAX = 4000  # a fault event carries up to 200 kB of text: a snapshot keeps a readable head of it


class MinMaxSeries:
    """Append-only (t, y) series kept as at most ``max_points`` points: min and max per time bucket.

    When full, bucket width doubles and neighbouring buckets merge (so memory is O(max_points) forever).
    Bucket ``k`` covers ``[k * bucket_s, (k + 1) * bucket_s)``. Points are real samples, never averages. The bucket
    being filled also shows its latest sample, so a live line ends at "now"; the budget accounts for it.
    """

    __slots__ = ("max_points", "bucket_s", "_max_buckets", "_closed", "_k", "_end", "_tmin", "_ymin", "_tmax",
                 "_ymax", "_tlast", "_ylast", "_count")

    def __init__(self, max_points: int = 2000, bucket_s: float = 0.2) -> None:
        if max_points < 3:
            raise ValueError("max_points must be at least 3")
        if not bucket_s > 0:
            raise ValueError("bucket_s must be > 0")
        self.max_points = max_points
        self.bucket_s = float(bucket_s)
        # Buckets (closed + the open one) so that 2 points each, plus the open bucket's latest sample, fit.
        self._max_buckets = (max_points - 1) // 2
        self._closed: list[tuple[int, float, float, float, float]] = []  # (k, tmin, ymin, tmax, ymax)
        self._k: int | None = None   # open bucket
        self._end = 0.0              # t at which the open bucket ends
        self._tmin = self._ymin = self._tmax = self._ymax = self._tlast = self._ylast = 0.0
        self._count = 0              # samples appended

    def append(self, t: float, y: float) -> None:
        if y is None:
            return
        self._count += 1
        if self._k is not None and t < self._end:
            # Same bucket (or, defensively, a sample older than the open bucket: it joins it).
            if y < self._ymin:
                self._tmin, self._ymin = t, y
            if y > self._ymax:
                self._tmax, self._ymax = t, y
            self._tlast, self._ylast = t, y
            return
        w = self.bucket_s
        k = math.floor(t / w)
        if self._k is not None:
            if k <= self._k:  # float edge: t >= end but floor says same bucket
                k = self._k + 1
            self._closed.append((self._k, self._tmin, self._ymin, self._tmax, self._ymax))
        self._k = k
        self._end = (k + 1) * w
        self._tmin = self._tmax = self._tlast = t
        self._ymin = self._ymax = self._ylast = y
        if len(self._closed) + 1 > self._max_buckets:
            self._double()

    def _double(self) -> None:
        while len(self._closed) + 1 > self._max_buckets:
            self.bucket_s *= 2
            merged: list[tuple[int, float, float, float, float]] = []
            for b in self._closed:
                k = b[0] // 2
                if merged and merged[-1][0] == k:
                    merged[-1] = _merge(merged[-1], b, k)
                else:
                    merged.append((k, b[1], b[2], b[3], b[4]))
            self._k = ok = self._k // 2  # type: ignore[operator]
            if merged and merged[-1][0] == ok:
                _, tmin, ymin, tmax, ymax = _merge(merged.pop(), (ok, self._tmin, self._ymin, self._tmax,
                                                                   self._ymax), ok)
                self._tmin, self._ymin, self._tmax, self._ymax = tmin, ymin, tmax, ymax
            self._closed = merged
            self._end = (ok + 1) * self.bucket_s

    def points(self) -> tuple[list[float], list[float]]:
        """(ts, ys) in time order; each bucket contributes its min and its max (one point if they are the same)."""
        ts: list[float] = []
        ys: list[float] = []
        for _, tmin, ymin, tmax, ymax in self._closed:
            _emit(ts, ys, tmin, ymin, tmax, ymax)
        if self._k is not None:
            _emit(ts, ys, self._tmin, self._ymin, self._tmax, self._ymax)
            if self._tlast > ts[-1]:
                ts.append(self._tlast)
                ys.append(self._ylast)
        return ts, ys

    def last(self) -> tuple[float, float] | None:
        return None if self._k is None else (self._tlast, self._ylast)

    @property
    def samples(self) -> int:
        """How many samples were appended (not how many are kept)."""
        return self._count

    def __len__(self) -> int:
        n = 0
        for _, tmin, ymin, tmax, ymax in self._closed:
            n += 1 if (tmin == tmax and ymin == ymax) else 2
        if self._k is not None:
            n += 1 if (self._tmin == self._tmax and self._ymin == self._ymax) else 2
            if self._tlast > max(self._tmin, self._tmax):
                n += 1
        return n

    def to_json(self) -> dict[str, list[float]]:
        ts, ys = self.points()
        return {"t": ts, "y": ys}


def _merge(a: tuple, b: tuple, k: int) -> tuple[int, float, float, float, float]:
    """Merge two buckets, ``a`` the earlier; ties keep the earlier sample."""
    tmin, ymin = (a[1], a[2]) if a[2] <= b[2] else (b[1], b[2])
    tmax, ymax = (a[3], a[4]) if a[4] >= b[4] else (b[3], b[4])
    return (k, tmin, ymin, tmax, ymax)


def _emit(ts: list[float], ys: list[float], tmin: float, ymin: float, tmax: float, ymax: float) -> None:
    if tmin == tmax and ymin == ymax:
        ts.append(tmin)
        ys.append(ymin)
    elif tmin <= tmax:
        ts += (tmin, tmax)
        ys += (ymin, ymax)
    else:
        ts += (tmax, tmin)
        ys += (ymax, ymin)


class AlignedMinMax:
    """Several columns sampled together (one row per round), decimated on one shared time axis.

    Per bucket it keeps the rows holding the min or the max of any column or of the row's sum, so every column's
    extremes and the stack's top survive, and every column has a value at every kept time (what a stacked chart
    needs). Columns can be added at any time; earlier rows count as 0 for them. At most ``max_points`` rows are
    kept as long as ``max_points >= 2 * (columns + 1) + 1`` (one bucket's worth).
    """

    def __init__(self, max_points: int = 2000, bucket_s: float = 0.2) -> None:
        if not bucket_s > 0:
            raise ValueError("bucket_s must be > 0")
        self.max_points = max_points
        self.bucket_s = float(bucket_s)
        self.columns: list[str] = []
        self._index: dict[str, int] = {}   # column name -> position in a row's values (0 is the sum)
        # closed buckets: [k, rows kept (time order), min row per position, max row per position]
        self._closed: list[list[Any]] = []
        self._closed_rows = 0
        self._k: int | None = None
        self._end = 0.0
        self._first: tuple | None = None  # open bucket: first row, last row, extremes
        self._last: tuple | None = None
        self._mn: list[float] = []
        self._mnr: list[tuple] = []
        self._mx: list[float] = []
        self._mxr: list[tuple] = []

    def column(self, name: str) -> int:
        """Position of column ``name`` in a row's values (registering it if new); position 0 is the sum."""
        j = self._index.get(name)
        if j is None:
            self.columns.append(name)
            j = self._index[name] = len(self.columns)
            for b in self._closed:  # all zeros there: any kept row holds the min and the max
                b[2].append(b[1][0])
                b[3].append(b[1][0])
            if self._k is not None:
                self._mn.append(0)
                self._mx.append(0)
                self._mnr.append(self._first)  # type: ignore[arg-type]
                self._mxr.append(self._first)  # type: ignore[arg-type]
                if self._closed_rows + self._open_budget() > self.max_points:
                    self._double()
        return j

    def append(self, t: float, values: dict[str, float]) -> None:
        """One round: ``values`` maps column name to value; columns left out count as 0 for this round."""
        row = [0] * (len(self.columns) + 1)
        for name, v in values.items():
            j = self.column(name)
            if j >= len(row):
                row.extend([0] * (j + 1 - len(row)))
            row[j] = v
        row[0] = sum(row[1:])
        self.append_row(t, row)

    def append_row(self, t: float, vals: list) -> None:
        """Fast path: ``vals[0]`` is the sum, ``vals[j]`` the value of column j (see ``column``), all columns."""
        r = (t, vals)
        if self._k is not None and t < self._end:
            mn, mx = self._mn, self._mx
            for j, v in enumerate(vals):
                if v < mn[j]:
                    mn[j] = v
                    self._mnr[j] = r
                elif v > mx[j]:
                    mx[j] = v
                    self._mxr[j] = r
            self._last = r
            return
        w = self.bucket_s
        k = math.floor(t / w)
        if self._k is not None:
            if k <= self._k:
                k = self._k + 1
            b = self._close_open()
            self._closed.append(b)
            self._closed_rows += len(b[1])
        self._k = k
        self._end = (k + 1) * w
        self._first = self._last = r
        self._mn = list(vals)
        self._mx = list(vals)
        self._mnr = [r] * len(vals)
        self._mxr = [r] * len(vals)
        if self._closed_rows + self._open_budget() > self.max_points:
            self._double()

    def _open_budget(self) -> int:
        return 2 * (len(self.columns) + 1) + 1

    def _close_open(self) -> list[Any]:
        rows = {id(r): r for r in self._mnr}
        rows.update((id(r), r) for r in self._mxr)
        return [self._k, sorted(rows.values(), key=_row_t), self._mnr, self._mxr]

    def _double(self) -> None:
        while self._closed and self._closed_rows + self._open_budget() > self.max_points:
            self.bucket_s *= 2
            merged: list[list[Any]] = []
            for b in self._closed:
                k = b[0] // 2
                if merged and merged[-1][0] == k:
                    merged[-1] = _merge_rows(merged[-1], b, k)
                else:
                    b[0] = k
                    merged.append(b)
            self._k = ok = self._k // 2  # type: ignore[operator]
            if merged and merged[-1][0] == ok:
                prev = merged.pop()
                _, _, self._mnr, self._mxr = _merge_rows(prev, [ok, [], self._mnr, self._mxr], ok)
                self._mn = [_val(r, j) for j, r in enumerate(self._mnr)]
                self._mx = [_val(r, j) for j, r in enumerate(self._mxr)]
                self._first = prev[1][0]
            self._closed = merged
            self._closed_rows = sum(len(b[1]) for b in merged)
            self._end = (ok + 1) * self.bucket_s

    def rows(self) -> list[tuple]:
        """The kept rows, in time order: (t, values) with values[0] the sum and values[j] column j (maybe short)."""
        out: list[tuple] = []
        for b in self._closed:
            out += b[1]
        if self._k is not None:
            b = self._close_open()
            out += b[1]
            if self._last is not None and self._last[0] > out[-1][0]:
                out.append(self._last)
        return out

    def points(self) -> dict[str, tuple[list[float], list[float]]]:
        """{column: (ts, ys)}; every column shares the same ts."""
        rows = self.rows()
        ts = [r[0] for r in rows]
        return {name: (ts, [_val(r, j) for r in rows]) for name, j in self._index.items()}

    def total(self) -> tuple[list[float], list[float]]:
        rows = self.rows()
        return [r[0] for r in rows], [r[1][0] for r in rows]

    def __len__(self) -> int:
        return len(self.rows())


def _row_t(r: tuple) -> float:
    return r[0]


def _val(r: tuple, j: int) -> float:
    v = r[1]
    return v[j] if j < len(v) else 0


def _merge_rows(a: list[Any], b: list[Any], k: int) -> list[Any]:
    mnr = [ra if _val(ra, j) <= _val(rb, j) else rb for j, (ra, rb) in enumerate(zip(a[2], b[2]))]
    mxr = [ra if _val(ra, j) >= _val(rb, j) else rb for j, (ra, rb) in enumerate(zip(a[3], b[3]))]
    rows = {id(r): r for r in mnr}
    rows.update((id(r), r) for r in mxr)
    return [k, sorted(rows.values(), key=_row_t), mnr, mxr]


def _role_order(role: str) -> tuple[int, str]:
    return (ROLES.index(role), "") if role in ROLES else (len(ROLES), role)


def _clip(x: Any) -> Any:
    if isinstance(x, str):
        return x if len(x) <= _EVENT_STR_MAX else x[:_EVENT_STR_MAX] + f"... [{len(x) - _EVENT_STR_MAX} more chars]"
    if isinstance(x, dict):
        return {k: _clip(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clip(v) for v in x]
    return x


class RunSeries:
    """Everything a memory chart needs, fed by records (live via Run.subscribe, or from a record file).

    Thread-safe: ``feed`` may run on a subscriber thread while a view calls ``snapshot``/``changed_since``.

    * ``tree_pss_by_role``: per RSS round, the sum of each process's PSS at that moment per role (measured in PSS
      rounds, carried forward between them by private memory: ``collect/estimate.py``), on one shared time axis;
      a role with no process in a round counts 0 there, also for rounds before it first appeared. Records made
      before the fast series existed give the PSS rounds instead.
    * ``tree_private``: per RSS round, the tree's anonymous PSS + swap (what the live leak verdict fits).
    * ``tree_rss``: per RSS round, the tree's RSS; ``main_rss``: the RSS of the process(es) whose role is "main".
    * ``host_available`` and ``limit`` from host samples (rounds without a limit are skipped).
    * ``events``: the last 200 events other than program output (long strings in their data cut to 4,000 chars).

    A round that found no process at all is skipped (the record cannot hold one), so live series and series
    read back from the record agree. ``RunSeries.follow(run)`` is the way to feed a view from a live run.
    """

    def __init__(self, max_points: int = 2000) -> None:
        self.max_points = max_points
        self._lock = threading.Lock()
        self._version = 0
        self._roles: dict[int, str] = {}
        self._main: set[int] = set()
        self._pid_col: dict[int, int] = {}
        self.pss_by_role = AlignedMinMax(max_points)
        self.tree_private = MinMaxSeries(max_points)
        self.tree_rss = MinMaxSeries(max_points)
        self.main_rss = MinMaxSeries(max_points)
        self.host_available = MinMaxSeries(max_points)
        self.limit = MinMaxSeries(max_points)
        self.events: deque[dict[str, Any]] = deque(maxlen=_EVENTS_KEPT)
        self.exited: set[int] = set()
        self.ended = False
        self.t_last = 0.0
        # the latest time fed per stream (``follow`` uses them to skip what the record already had)
        self._t_rss = self._t_pss = self._t_host = -math.inf
        self._unsubscribe: Any = None

    # -- feeding -----------------------------------------------------------------------------------------------
    def feed(self, rec: Any) -> None:
        with self._lock:
            if self._feed(rec):
                self._version += 1

    def __call__(self, rec: Any) -> None:  # so that ``run.subscribe(series)`` works
        self.feed(rec)

    def _feed(self, rec: Any) -> bool:
        if isinstance(rec, TreeSample):
            if not rec.procs:
                return False  # a round that found no process: the record cannot hold it, so neither do we
            if rec.kind == "rss":
                self._rss_round(rec.t, [(p.pid, p.rss) for p in rec.procs])
                if rec.procs[0].est_pss is not None:
                    self._pss_round(rec.t, [(p.pid, p.est_pss) for p in rec.procs])
                    self.tree_private.append(rec.t, rec.est_private_total)
            elif rec.procs[0].est_pss is None:  # an older producer: PSS rounds only
                self._pss_round(rec.t, [(p.pid, p.pss) for p in rec.procs])
            return True
        if isinstance(rec, HostSample):
            self._host(rec.t, rec.available, rec.limit)
            return True
        if isinstance(rec, ProcessSeen):
            self._seen(rec.pid, rec.role)
            return True
        if isinstance(rec, ProcessExited):
            self.exited.add(rec.pid)
            return True
        if isinstance(rec, Event):
            return self._event(rec.t, rec.pid, rec.kind, rec.data)
        if isinstance(rec, RunEnded):
            self.ended = True
            return True
        return False

    def _seen(self, pid: int, role: str) -> None:
        self._roles[pid] = role
        self._pid_col.pop(pid, None)
        if role == "main":
            self._main.add(pid)
        else:
            self._main.discard(pid)
        self.exited.discard(pid)  # a pid seen again is a new process

    def _pss_round(self, t: float, procs: Iterable[tuple[int, int | None]]) -> None:
        agg = self.pss_by_role
        vals = [0] * (len(agg.columns) + 1)
        pid_col = self._pid_col
        total = 0
        for pid, pss in procs:
            j = pid_col.get(pid)
            if j is None:
                j = pid_col[pid] = agg.column(self._roles.get(pid, "other"))
                if j >= len(vals):
                    vals.extend([0] * (j + 1 - len(vals)))
            if pss:
                vals[j] += pss
                total += pss
        vals[0] = total
        agg.append_row(t, vals)
        self._t_pss = t
        if t > self.t_last:
            self.t_last = t

    def _rss_round(self, t: float, procs: Iterable[tuple[int, int]]) -> None:
        main = self._main
        total = m = 0
        found = False
        for pid, rss in procs:
            total += rss
            if pid in main:
                m += rss
                found = True
        self.tree_rss.append(t, total)
        if found:
            self.main_rss.append(t, m)
        self._t_rss = t
        if t > self.t_last:
            self.t_last = t

    def _host(self, t: float, available: int, limit: int | None) -> None:
        self.host_available.append(t, available)
        if limit is not None:
            self.limit.append(t, limit)
        self._t_host = t

    def _event(self, t: float, pid: int | None, kind: str, data: Any) -> bool:
        if kind == "output" or kind.startswith("__"):
            return False
        try:
            data = json.loads(json.dumps(data, default=repr))
        except (TypeError, ValueError):
            data = {"repr": repr(data)}
        self.events.append({"t": t, "pid": pid, "kind": kind, "data": _clip(data)})
        return True

    # -- following a run live ----------------------------------------------------------------------------------
    @classmethod
    def follow(cls, run: Any, max_points: int = 2000, history: bool = True) -> "RunSeries":
        """Series of a ``memscope.Run`` that keep up with it (``Run.subscribe``); ``close()`` stops following.

        With ``history`` the series first read what the run's record already holds, so a view opened an hour
        into a run shows the whole hour. Records that arrive meanwhile are held back and then replayed, skipping
        those the record already had. Process roles are also taken from the run's own snapshot, so that a
        subscription that starts after the processes were announced still knows which one is "main".
        """
        gate = threading.Lock()
        pending: list[Any] = []
        box: list[RunSeries] = []

        def on_record(rec: Any) -> None:
            with gate:
                if not box:
                    pending.append(rec)
                    return
            box[0].feed(rec)

        unsubscribe = run.subscribe(on_record)
        if history:
            sync = getattr(run, "_recorder_sync", None)
            if sync is not None:
                sync()  # everything published before the subscription is in the file now
            rs = cls.from_record(run.record_path, max_points)
        else:
            rs = cls(max_points)
        rs._unsubscribe = unsubscribe
        with gate:
            with rs._lock:
                for pid, d in list(getattr(getattr(run, "snapshot", None), "procs", {}).items()):
                    if d.get("role"):
                        rs._seen(pid, d["role"])
                t_rss, t_pss, t_host = rs._t_rss, rs._t_pss, rs._t_host
                had = {(e["t"], e["pid"], e["kind"]) for e in rs.events}
                for rec in pending:
                    t = getattr(rec, "t", None)
                    if isinstance(rec, TreeSample) and t <= (t_pss if rec.kind == "pss" else t_rss):
                        continue
                    if isinstance(rec, HostSample) and t <= t_host:
                        continue
                    if isinstance(rec, Event) and (t, rec.pid, rec.kind) in had:
                        continue
                    rs._feed(rec)
                rs._version += 1
            pending.clear()
            box.append(rs)
        return rs

    def close(self) -> None:
        """Stop following the run (see ``follow``); the series keep what they have."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()

    # -- reading a record --------------------------------------------------------------------------------------
    @classmethod
    def from_record(cls, path: str, max_points: int = 2000) -> "RunSeries":
        """Build the series from a run's SQLite record (finished or still being written), streaming its rows.

        The record keeps each process's latest role only, so a process whose role changed during the run counts
        under its final role for the whole run here.
        """
        from ..model import KIND_PSS, KIND_RSS
        from ..record.reader import RunData

        self = cls(max_points)
        rd = RunData(path)
        try:
            with self._lock:
                exits = []
                for pid, role, exit_t in rd.process_exits():
                    self._seen(pid, role or "other")
                    if exit_t is not None:
                        exits.append(pid)
                cur = rd.sample_rows(KIND_RSS, "rss")
                for t, procs in _rounds(cur):
                    self._rss_round(t, procs)
                if rd.has_fast:
                    cur = rd.sample_rows(KIND_RSS, "est_pss")
                    for t, procs in _rounds(cur):
                        self._pss_round(t, procs)
                    for t, v in rd.fast_totals(private=True):
                        self.tree_private.append(t, v)
                else:
                    cur = rd.sample_rows(KIND_PSS, "pss")
                    for t, procs in _rounds(cur):
                        self._pss_round(t, procs)
                for t, avail, lim in rd.host_available():
                    self._host(t, avail, lim)
                rows = rd.last_events(_EVENTS_KEPT)
                for t, pid, kind, data in reversed(rows):
                    try:
                        d = json.loads(data) if data else {}
                    except ValueError:
                        d = {"text": data}
                    self._event(t, pid, kind, d)
                self.exited.update(exits)
                self.ended = rd.ended()
                self._version += 1
        finally:
            rd.close()
        return self

    # -- reading -----------------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    def changed_since(self, version: int) -> bool:
        return self._version != version

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able picture of every series (t in seconds since the run started, y in bytes)."""
        with self._lock:
            by_role = self.pss_by_role.points()
            roles = sorted(by_role, key=_role_order)
            return {
                "tree_pss_by_role": {r: {"t": list(by_role[r][0]), "y": by_role[r][1]} for r in roles},
                "main_rss": self.main_rss.to_json(),
                "host_available": self.host_available.to_json(),
                "limit": self.limit.to_json(),
                "tree_rss": self.tree_rss.to_json(),
                "events": list(self.events),
                "ended": self.ended,
                "t_last": self.t_last,
                "version": self._version,
            }


def _rounds(cur: Iterable[tuple]) -> Iterable[tuple[float, list[tuple[int, Any]]]]:
    """Group (t, pid, value) rows, ordered by t, into rounds."""
    t0: float | None = None
    procs: list[tuple[int, Any]] = []
    for t, pid, v in cur:
        if t != t0:
            if t0 is not None:
                yield t0, procs
            t0, procs = t, []
        procs.append((pid, v))
    if t0 is not None:
        yield t0, procs
