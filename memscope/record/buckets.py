"""The record's downsampling as the run goes: old sampling rounds reduced, per time bucket, to a few whole rounds.

Rounds younger than the first tier's age (30 min) stay at full resolution; older ones are reduced to buckets of
1 min, then 5 min past 3 h, then 15 min past 12 h (ages from the latest round). A bucket keeps WHOLE rounds (every
process of that moment): per kind, the rounds where the tree's total of each column is highest and lowest, where
each role's PSS is highest and its private memory lowest (the main's statm private too: its leak is judged
on it), and the bucket's last; rounds within ``EVENT_MARGIN_S``
of a phase switch, an epoch, a mark, a process start or exit are kept as they are. Whole rounds keep the tree's
and each role's totals exact at the kept times, so the readers' SQL (sums grouped by round) is the same on a
bucketed record as on a full one, and each reduction composes with the next (the max of maxima is the max): the
tree's peak round, the fast series' peak and each role's peak survive every tier with their times. A process's
own peak may fall in a dropped round: the writer keeps those in the ``peaks`` table.

Each pass runs in one transaction on the writer's connection: a reader (WAL) sees the record before or after it,
and a run killed during one leaves the record as it was before. Deleted pages go to SQLite's free list and are
reused by the next inserts, so the file stops growing once the full-resolution window is filled; no
``auto_vacuum``/``incremental_vacuum``: it would move pages on the writer's thread every pass to give back at
most the window's worth (a few MiB) that the next minutes fill again.
"""

from __future__ import annotations

import bisect
import math
import sqlite3
from typing import Any

from ..model import KIND_PSS, KIND_RSS

# (age in seconds past which rounds are reduced, bucket in seconds); each bucket a multiple of the one before.
TIERS: tuple[tuple[float, float], ...] = ((1800.0, 60.0), (3 * 3600.0, 300.0), (12 * 3600.0, 900.0))
COMPACT_EVERY_S = 60.0  # a pass every minute of the run
EVENT_MARGIN_S = 1.0  # rounds this close to an event are kept in full
PROTECT_EVENTS = frozenset(
    {"phase", "epoch", "mark", "exception", "fault", "signal_sent", "cgroup_changed", "cuda_oom", "exit_status"}
)
MAX_PROTECTED = 20_000  # event times remembered (oldest forgotten first: a run that marks every step)
MAX_BUCKETS_PER_PASS = 240  # a pass's work is bounded; a backlog is caught up over the next passes

# Per kind: the per-round sums the selection looks at (SQL over samples s), and which of them each role keeps
# at its highest (its peak) and lowest (its floor).
_SUMS = {
    KIND_RSS: ("SUM(s.rss)", "SUM(s.est_pss)", "SUM(s.est_private)", "SUM(s.private)"),
    KIND_PSS: ("SUM(s.rss)", "SUM(s.pss)", "SUM(COALESCE(s.anon, s.pss) + COALESCE(s.swap, 0))"),
}
_ROLE_MAX = {KIND_RSS: (1,), KIND_PSS: (1,)}
_ROLE_MIN = {KIND_RSS: (2,), KIND_PSS: (2,)}
_MAIN_MIN = {KIND_RSS: (3,), KIND_PSS: ()}  # the main's own statm private memory (summary: main_private)
_TREE = {KIND_RSS: (0, 1, 2), KIND_PSS: (0, 1, 2)}  # the tree's highest and lowest of these
# host rows: a change in any of these columns is kept (limits, totals and OOM counters are read as deltas)
_HOST_COLS = "rowid, t, total, available, swap_total, swap_used, lim, cgroup_usage, host_oom, cgroup_oom"


class Compactor:
    """Remembers what the writer saw (the latest round's time, event times) and reduces old rounds when due."""

    def __init__(self, tiers: tuple[tuple[float, float], ...] = TIERS, every_s: float = COMPACT_EVERY_S) -> None:
        self.tiers = tiers
        self.every_s = every_s
        self.now: float | None = None  # the latest round's t
        self.first: float | None = None  # the first round's t
        self.done: list[float | None] = [None] * len(tiers)  # per tier: reduced up to here (bucket-aligned)
        self.protected: list[float] = []  # event times, sorted
        self.next_at: float | None = None
        self.passes = 0
        self.deleted = 0

    def saw_round(self, t: float) -> None:
        """A sampling round at ``t`` was written."""
        if self.first is None:
            self.first = t
            self.next_at = t + self.every_s
        if self.now is None or t > self.now:
            self.now = t

    def protect(self, t: float) -> None:
        """Keep the rounds around ``t`` (an event) in full."""
        if not isinstance(t, (int, float)) or math.isnan(t):
            return
        bisect.insort(self.protected, float(t))
        if len(self.protected) > MAX_PROTECTED:
            del self.protected[0]

    def due(self) -> bool:
        """Whether a pass is due (every ``every_s`` of the run's own time)."""
        return self.next_at is not None and self.now is not None and self.now >= self.next_at

    def run(self, con: sqlite3.Connection) -> int:
        """One pass on ``con`` (the caller commits): each tier reduces the buckets that aged past it. Returns
        the rows deleted."""
        if self.now is None or self.first is None:
            return 0
        self.next_at = self.now + self.every_s
        self.passes += 1
        n = 0
        for i, (age, step) in enumerate(self.tiers):
            end = math.floor((self.now - age) / step) * step
            start = self.done[i]
            if start is None:
                start = math.floor(self.first / step) * step
            todo = 0
            while start + step <= end and todo < MAX_BUCKETS_PER_PASS:
                n += self._bucket(con, start, start + step)
                start += step
                todo += 1
            self.done[i] = start
        self.deleted += n
        return n

    def _near_event(self, t: float) -> bool:
        i = bisect.bisect_left(self.protected, t - EVENT_MARGIN_S)
        return i < len(self.protected) and self.protected[i] <= t + EVENT_MARGIN_S

    def _bucket(self, con: sqlite3.Connection, a: float, b: float) -> int:
        n = 0
        for kind in (KIND_RSS, KIND_PSS):
            keep = self._rounds_kept(con, kind, a, b)
            if keep is None:
                continue
            marks = ",".join("?" * len(keep))
            n += con.execute(
                f"DELETE FROM samples WHERE kind=? AND t>=? AND t<? AND t NOT IN ({marks})", (kind, a, b, *keep)
            ).rowcount
        n += self._host_bucket(con, a, b)
        return n

    def _rounds_kept(self, con: sqlite3.Connection, kind: int, a: float, b: float) -> list[float] | None:
        """The rounds of ``kind`` in [a, b) to keep; None when every round there is kept."""
        sums = _SUMS[kind]
        rounds: dict[float, list[Any]] = {}  # t -> tree sums
        best: dict[tuple, tuple[Any, float]] = {}  # (metric, max?) -> (value, t)

        def see(key: tuple, v: Any, t: float, high: bool) -> None:
            if v is None:
                return
            cur = best.get((key, high))
            if cur is None or (v > cur[0] if high else v < cur[0]):
                best[(key, high)] = (v, t)

        for row in con.execute(
            f"SELECT s.t, COALESCE(p.role, 'other'), {', '.join(sums)} FROM samples s "
            "LEFT JOIN processes p ON p.pid = s.pid WHERE s.kind=? AND s.t>=? AND s.t<? GROUP BY s.t, 2",
            (kind, a, b),
        ):
            t, role, vals = row[0], row[1], row[2:]
            tot = rounds.setdefault(t, [None] * len(sums))
            for j, v in enumerate(vals):
                if v is not None:
                    tot[j] = v if tot[j] is None else tot[j] + v
            for j in _ROLE_MAX[kind]:
                see((role, j), vals[j], t, True)
            for j in _ROLE_MIN[kind] + (_MAIN_MIN[kind] if role == "main" else ()):
                see((role, j), vals[j], t, False)
        if len(rounds) <= 2:
            return None
        for t, tot in rounds.items():
            for j in _TREE[kind]:
                see(("", j), tot[j], t, True)
                see(("", j), tot[j], t, False)
        keep = {t for _, t in best.values()}
        keep.add(max(rounds))
        keep.update(t for t in rounds if self._near_event(t))
        if len(keep) >= len(rounds):
            return None
        return sorted(keep)

    def _host_bucket(self, con: sqlite3.Connection, a: float, b: float) -> int:
        rows = con.execute(f"SELECT {_HOST_COLS} FROM host WHERE t>=? AND t<? ORDER BY t", (a, b)).fetchall()
        if len(rows) <= 3:
            return 0
        prev = con.execute(f"SELECT {_HOST_COLS} FROM host WHERE t<? ORDER BY t DESC LIMIT 1", (a,)).fetchone()
        keep = {rows[-1][0]}
        lowest = min((r for r in rows if r[3] is not None), key=lambda r: r[3], default=None)
        highest = max((r for r in rows if r[7] is not None), key=lambda r: r[7], default=None)
        keep.update(r[0] for r in (lowest, highest) if r is not None)
        for r in rows:
            # totals, swap size, limit and the OOM counters: every change is kept (read as first/last deltas)
            if prev is None or (r[2], r[4], r[6], r[8], r[9]) != (prev[2], prev[4], prev[6], prev[8], prev[9]):
                keep.add(r[0])
            elif self._near_event(r[1]):
                keep.add(r[0])
            prev = r
        if len(keep) >= len(rows):
            return 0
        marks = ",".join("?" * len(keep))
        return con.execute(
            f"DELETE FROM host WHERE t>=? AND t<? AND rowid NOT IN ({marks})", (a, b, *sorted(keep))
        ).rowcount
