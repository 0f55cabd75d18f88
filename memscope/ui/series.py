"""Bounded, spike-preserving chart series: the data model every view (notebook, HTML report, terminal) draws from.

A 24 h run sampled at 10 Hz is 864,000 rounds; a browser should never hold more than ~2,000 points per line. Each
series keeps, per time bucket, the sample with the smallest and the one with the largest value (each at its own
time), so that a one-sample spike is never averaged away. When the budget is reached the bucket width doubles and
neighbouring buckets merge, so memory stays O(max_points) for as long as a run lasts.

* ``MinMaxSeries`` and ``AlignedMinMax`` (minmax.py): one line, and several on one shared time axis.
* ``RunSeries``: everything a memory chart needs, fed record by record (live through ``Run.subscribe``) or from
  a record file (``RunSeries.from_record``); ``snapshot()`` is JSON-able.
"""

from __future__ import annotations

import json
import math
import threading
from collections import deque
from typing import Any, Iterable

from ..model import KIND_PSS, KIND_RSS, ROLES, Event, HostSample, ProcessExited, ProcessSeen, RunEnded, TreeSample
from ..record.reader import RunData
from .minmax import AlignedMinMax, MinMaxSeries

__all__ = ["MinMaxSeries", "AlignedMinMax", "RunSeries"]

_EVENTS_KEPT = 200
_EVENT_STR_MAX = 4000  # a fault event carries up to 200 kB of text: a snapshot keeps a readable head of it


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
        self.pss_by_role = AlignedMinMax(max_points)
        self.tree_private = MinMaxSeries(max_points)
        # The live verdict's parts, as the summary fits them (analysis/leak.part_verdicts): the main's own private
        # memory (statm), and each other process's (anonymous PSS + swap) on its own.
        self.main_own = MinMaxSeries(max_points)
        self.proc_private: dict[int, MinMaxSeries] = {}
        self._part_span: dict[int, list[float]] = {}  # pid -> [first, last] t of its series in proc_private
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
        """Take one record of the run."""
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
                    self._parts_round(rec.t, [(p.pid, p.private, p.est_private) for p in rec.procs])
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
        if role == "main":
            self._main.add(pid)
        else:
            self._main.discard(pid)
        self.exited.discard(pid)  # a pid seen again is a new process

    def _pss_round(self, t: float, procs: Iterable[tuple[int, int | None]]) -> None:
        roles = self._roles
        self._pss_roles(t, ((roles.get(pid, "other"), pss) for pid, pss in procs))

    def _rss_round(self, t: float, procs: Iterable[tuple[int, int]]) -> None:
        main = self._main
        self._rss_roles(t, (("main" if pid in main else "other", rss) for pid, rss in procs))

    def _parts_round(self, t: float, procs: Iterable[tuple[int, int | None, int | None]]) -> None:
        own = None
        for pid, private, est in procs:
            if pid in self._main:
                if private is not None:
                    own = (own or 0) + private
            elif est is not None:
                series = self._proc_series(pid, t)
                if series is not None:
                    series.append(t, est)
                    self._part_span[pid][1] = t
        if own is not None:
            self.main_own.append(t, own)

    def _proc_series(self, pid: int, t: float) -> MinMaxSeries | None:
        """The series of ``pid``'s own memory; None if _PARTS_KEPT live processes are kept already. A tree that
        forks all the time (DataLoader workers each epoch) drops the shortest-lived process that has exited, never
        a live one: dropping the newest live one let eight new workers evict each other at every round (each
        eviction reading 64 series whole), which after 64 workers took the kernel's core."""
        s = self.proc_private.get(pid)
        if s is None:
            if len(self.proc_private) >= _PARTS_KEPT:
                spans = self._part_span
                gone = min(
                    (p for p in self.proc_private if p in self.exited),
                    key=lambda p: spans[p][1] - spans[p][0],
                    default=None,
                )
                if gone is None:
                    return None
                del self.proc_private[gone], spans[gone]
            s = self.proc_private[pid] = MinMaxSeries(self.max_points // 4)
            self._part_span[pid] = [t, t]
        return s

    def parts(self) -> tuple[tuple[list[float], list[float]], dict[int, tuple[str, list[float], list[float]]]]:
        """The main's own private memory, and each other process's (role, t, private): what the leak verdict's
        parts are fitted on (call with the lock held)."""
        procs = {pid: (self._roles.get(pid, "other"), *s.points()) for pid, s in self.proc_private.items()}
        return self.main_own.points(), procs

    def _rss_roles(self, t: float, roles: Iterable[tuple[str, int | None]]) -> None:
        """A round of RSS from its per-role sums (``RunData.role_sums``, or a live round's processes by role):
        None where the role had no process."""
        total = m = 0
        found = False
        for role, v in roles:
            if v is None:
                continue  # no process of that role in this round
            total += v
            if role == "main":
                m += v or 0
                found = True
        self.tree_rss.append(t, total)
        if found:
            self.main_rss.append(t, m)
        self._t_rss = t
        if t > self.t_last:
            self.t_last = t

    def _pss_roles(self, t: float, roles: Iterable[tuple[str, int | None]]) -> None:
        """A round of PSS (or its fast estimate) from its per-role sums, stacked by role."""
        agg = self.pss_by_role
        vals = [0] * (len(agg.columns) + 1)
        total = 0
        for role, v in roles:
            if v is None:
                continue
            j = agg.column(role)
            if j >= len(vals):
                vals.extend([0] * (j + 1 - len(vals)))
            if v:
                vals[j] += v
                total += v
        vals[0] = total
        agg.append_row(t, vals)
        self._t_pss = t
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
            sync = getattr(run, "flush", None)
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
                    if isinstance(rec, TreeSample) and rec.t <= (t_pss if rec.kind == "pss" else t_rss):
                        continue
                    if isinstance(rec, HostSample) and rec.t <= t_host:
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
        self = cls(max_points)
        rd = RunData(path)
        try:
            with self._lock:
                exits = []
                for pid, role, exit_t in rd.process_exits():
                    self._seen(pid, role or "other")
                    if exit_t is not None:
                        exits.append(pid)
                # Per round and role, summed by SQLite: a few rows a round, not one per process.
                if rd.has_fast:
                    names, rows = rd.role_sums(KIND_RSS, ("rss", "est_pss"), ("est_private",))
                    n = len(names)
                    t = 0.0
                    for row in rows:
                        t = row[0]
                        self._rss_roles(t, zip(names, row[1 : n + 1]))
                        self._pss_roles(t, zip(names, row[n + 1 : 2 * n + 1]))
                        self.tree_private.append(t, row[-1])
                    # The leak verdict's parts: each process's own floor, the main's own private memory, in
                    # buckets of the run's length / 4000 at least, as the summary reads them (a week's record
                    # read at 0.2 s was every row of every process: 10 s of the reopen).
                    # (the longest-lived _PARTS_KEPT, as a live run keeps them)
                    floor_s = max(0.2, t / 4000)
                    floors = {p: f for p, f in rd.process_fast_floors(floor_s).items() if f[0] != "main" and f[1]}
                    longest = sorted(floors, key=lambda p: floors[p][1][-1] - floors[p][1][0], reverse=True)
                    for pid in sorted(longest[:_PARTS_KEPT]):
                        _, ts, ys = floors[pid]
                        part = self.proc_private[pid] = MinMaxSeries(self.max_points // 4)
                        for t, v in zip(ts, ys):
                            part.append(t, v)
                        self._part_span[pid] = [ts[0], ts[-1]]
                    main_own = rd.role_fast_total("main", column="private", floor_s=floor_s) or ([], [])
                    for t, v in zip(*main_own):
                        self.main_own.append(t, v)
                else:
                    names, rows = rd.role_sums(KIND_RSS, ("rss",))
                    for t, *vals in rows:
                        self._rss_roles(t, zip(names, vals))
                    cur = rd.sample_rows(KIND_PSS, "pss")
                    for t, procs in _rounds(cur):
                        self._pss_round(t, procs)
                for t, avail, lim in rd.host_available():
                    self._host(t, avail, lim)
                rows = rd.last_events(_EVENTS_KEPT)
                for t, event_pid, kind, data in reversed(rows):
                    try:
                        d = json.loads(data) if data else {}
                    except ValueError:
                        d = {"text": data}
                    self._event(t, event_pid, kind, d)
                self.exited.update(exits)
                self.ended = rd.ended()
                self._version += 1
        finally:
            rd.close()
        return self

    # -- reading -----------------------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """A number that changes whenever the series do."""
        return self._version

    def changed_since(self, version: int) -> bool:
        """Whether the series changed since ``version``."""
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


_PARTS_KEPT = 64  # processes whose own series the live leak verdict keeps


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
