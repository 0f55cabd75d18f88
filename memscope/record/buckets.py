"""The record's downsampling as the run goes: old sampling rounds reduced, per time bucket, to a few whole rounds.

Rounds younger than the first tier's age (30 min) stay at full resolution; older ones are reduced to buckets of
1 min, then 5 min past 3 h, then 15 min past 12 h (ages from the latest round). A bucket keeps WHOLE rounds (every
process of that moment): per kind, the rounds where the tree's total of each column is highest and lowest, where
each role's PSS is highest and its private memory lowest (the main's statm private too: its leak is judged
on it), and the bucket's last; rounds within ``EVENT_MARGIN_S``
of a phase switch, an epoch, a mark, a process start or exit are kept as they are, and so are the rounds around
each excursion of the tree's memory above its running baseline (``Excursions``: its rise, its highest round
and its fall), so that the summary finds the same spikes, with the same heights and edges, on a bucketed record as at
full resolution: a bucket's one maximum would merge two spikes and drop a smaller one. Whole rounds keep the tree's
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
from collections import deque
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
# Excursions (spikes, plateaus) of the tree's fast series (its PSS at every RSS round) above its running baseline.
SPIKE_MARGIN_S = 0.6  # rounds this close to an excursion's edges are kept: the floor each side separates two spikes
# An excursion's first second is kept whole, then its fall; its top is its bucket's highest round. Keeping the
# first 10 s whole doubled a week's record (1,199 spikes; 108 MiB against 57) and its summary's and reopen's
# cost, for the same spikes found (the 8 h replay: 52 of 52 either way, 8 % fewer rows).
SPIKE_FULL_S = 1.0
BASELINE_S = 600.0  # the baseline: the tree's lowest over 10 min before and after (longer than a validation plateau)
MAX_SPANS = 20_000  # kept spans remembered (oldest forgotten first), beyond those the last tier has reduced
MAX_KEPT_FRACTION = 0.05  # of the last hour's rounds, kept for excursions at most
# The analysis' spike threshold is at least these over its floor (analysis/_stats.py): this one is lower, never
# higher (a spike the summary would find is never bucketed away), and well above the rounds' own noise.
_NOISE_SIGMAS = 10.0
_MIN_EXCURSION_BYTES = 1024 * 1024
_MIN_EXCURSION_FRACTION = 0.0025

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
        # the baseline looks ahead: at most half the first tier's age (rounds still whole when they are decided)
        self.excursions = Excursions(min(BASELINE_S, tiers[0][0] / 2) if tiers else BASELINE_S)

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
        if self.done[-1] is not None:  # the last tier never looks at these rounds again
            self.excursions.forget_before(self.done[-1])
        return n

    def save(self) -> Any:
        """What a pass changes, to undo it when its transaction is rolled back (``restore``)."""
        return list(self.done), self.excursions.copy()

    def restore(self, state: Any) -> None:
        """Back to ``save``'s state: the rounds of a rolled-back pass are reduced (and scanned) again."""
        done, exc = state
        self.done, self.excursions = list(done), exc

    def _near_event(self, t: float) -> bool:
        i = bisect.bisect_left(self.protected, t - EVENT_MARGIN_S)
        return i < len(self.protected) and self.protected[i] <= t + EVENT_MARGIN_S

    def _bucket(self, con: sqlite3.Connection, a: float, b: float) -> int:
        # Excursions are found on the full-resolution rounds, up to the margin after this bucket, before any is dropped.
        self.excursions.scan(con, b + SPIKE_MARGIN_S, self.first)
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
        best: dict[tuple[Any, ...], tuple[Any, float]] = {}  # (metric, max?) -> (value, t)

        def see(key: tuple[Any, ...], v: Any, t: float, high: bool) -> None:
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
        near = self.excursions.near
        keep.update(t for t in rounds if self._near_event(t) or near(t))
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


class Excursions:
    """The spans of rounds kept around the tree's excursions above its baseline, found in one pass in time order
    over the full-resolution rounds (before the first tier reduces them) and remembered for the later tiers.

    The baseline at a round is, as the summary's spike floor, the higher of the tree's lowest over the ``window``
    before it and over the ``window`` after it (the first tier leaves the rounds whole long enough to look
    ahead): a spike or a validation plateau is above both, a step up (workers that warm up, a new plateau) and a
    slow leak are not. A round is in an excursion when it is more than a threshold above it: below the summary's
    spike threshold, so that every spike it would find keeps its rounds, and well above the rounds' noise. Kept:
    ``SPIKE_MARGIN_S`` before each excursion's first round, its first ``SPIKE_FULL_S`` whole, its highest round,
    and ``SPIKE_MARGIN_S`` around its last round; at most ``MAX_KEPT_FRACTION`` of the last hour (a run whose memory
    jumps all the time keeps its record bounded: its later excursions are bucketed as the rest). The state is
    the two windows' rounds and the spans the last tier has not reduced yet (at most ``MAX_SPANS``)."""

    def __init__(self, window: float = BASELINE_S) -> None:
        self.window = window
        self.until: float | None = None  # scanned up to here (exclusive)
        self.low: deque[tuple[float, int]] = deque()  # (t, v), v increasing: the lowest over the window before
        self.ahead: deque[tuple[float, int]] = deque()  # the same over the rounds not decided yet
        self.pending: deque[tuple[float, int, int]] = deque()  # (t, v, lowest before): decided a window later
        self.start: float | None = None  # the open excursion's first round
        self.top: tuple[float, int] = (0.0, 0)  # ... and its highest
        self.kept = False  # whether the open excursion is kept (within the budget)
        self.last_above = 0.0
        self.sigma = 0.0  # the rounds' noise (from successive differences)
        self.lo: list[float] = []  # kept spans [lo, hi], sorted, disjoint
        self.hi: list[float] = []
        self.found = 0  # excursions seen (benchmarks, tests)
        self.skipped = 0  # ... and not kept (over the budget)

    def copy(self) -> Excursions:
        """An independent copy (``Compactor.save``)."""
        c = Excursions(self.window)
        c.__dict__.update(self.__dict__)
        c.low, c.ahead, c.pending = deque(self.low), deque(self.ahead), deque(self.pending)
        c.lo, c.hi = list(self.lo), list(self.hi)
        return c

    def near(self, t: float) -> bool:
        """Whether the round at ``t`` is kept."""
        i = bisect.bisect_right(self.lo, t) - 1
        return i >= 0 and t <= self.hi[i]

    def forget_before(self, t: float) -> None:
        """Drop the spans that end before ``t``."""
        k = bisect.bisect_left(self.hi, t)
        if k:
            del self.lo[:k], self.hi[:k]

    def _span(self, lo: float, hi: float) -> None:
        if self.hi and lo <= self.hi[-1]:
            self.hi[-1] = max(self.hi[-1], hi)
            return
        self.lo.append(lo)
        self.hi.append(hi)
        if len(self.lo) > MAX_SPANS:
            del self.lo[0], self.hi[0]

    def _within_budget(self, t: float) -> bool:
        k = bisect.bisect_left(self.hi, t - 3600.0)
        used = sum(min(h, t) - max(lo, t - 3600.0) for lo, h in zip(self.lo[k:], self.hi[k:]))
        return used < MAX_KEPT_FRACTION * 3600.0

    def scan(self, con: sqlite3.Connection, end: float, first: float | None) -> None:
        """Decide the rounds up to ``end`` (exclusive): read the tree's fast series, per RSS round, a window
        further (rounds still whole: the caller's first tier reduces rounds older than that)."""
        a = self.until if self.until is not None else first
        if a is None or end + self.window <= a:
            return
        rows = con.execute(
            "SELECT t, COALESCE(SUM(est_pss), SUM(rss)) FROM samples WHERE kind=? AND t>=? AND t<? GROUP BY t "
            "ORDER BY t",
            (KIND_RSS, a, end + self.window),
        ).fetchall()
        self.until = end + self.window
        self.feed(rows)

    def feed(self, rows: list[tuple[float, Any]]) -> None:
        """Rounds (t, the tree's fast series), in time order after the last fed: the rounds a window older than
        the last of these are decided."""
        diffs = sorted(abs(b[1] - a[1]) for a, b in zip(rows, rows[1:]) if a[1] is not None and b[1] is not None)
        if len(diffs) >= 20:  # |N(0, 2 s^2)| has its 20th percentile at 0.2533*sqrt(2)*s (as analysis/_stats.py)
            self.sigma = diffs[len(diffs) // 5] / (0.2533 * math.sqrt(2.0))
        low, ahead, pending, w = self.low, self.ahead, self.pending, self.window
        for t, v in rows:
            if v is None:
                continue
            while low and low[-1][1] >= v:
                low.pop()
            low.append((t, v))
            while low[0][0] < t - w:
                low.popleft()
            pending.append((t, v, low[0][1]))
            while ahead and ahead[-1][1] >= v:
                ahead.pop()
            ahead.append((t, v))
            while pending[0][0] <= t - w:
                pt, pv, before = pending.popleft()
                while ahead[0][0] < pt:
                    ahead.popleft()
                self._decide(pt, pv, max(before, ahead[0][1]))

    def _decide(self, t: float, v: int, base: int) -> None:
        thr = max(_MIN_EXCURSION_BYTES, _MIN_EXCURSION_FRACTION * abs(base), _NOISE_SIGMAS * self.sigma)
        if v - base > thr:
            if self.start is None:
                self.start = t
                self.top = (t, v)
                self.found += 1
                self.kept = self._within_budget(t)
                if self.kept:
                    self._span(t - SPIKE_MARGIN_S, t + SPIKE_FULL_S)
                else:
                    self.skipped += 1
            elif v > self.top[1]:
                self.top = (t, v)
            self.last_above = t
        elif self.start is not None:
            if not self.kept:
                pass
            elif self.last_above <= self.start + SPIKE_FULL_S:  # a spike: kept whole, up to the margin after it
                if self.hi:
                    self.hi[-1] = self.last_above + SPIKE_MARGIN_S
            else:  # longer: its top round (a bucket keeps one top, and may hold several spikes), then its fall
                self._span(self.top[0], self.top[0])
                self._span(self.last_above - SPIKE_MARGIN_S, self.last_above + SPIKE_MARGIN_S)
            self.start = None
