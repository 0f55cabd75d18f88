"""Bounded, spike-preserving series: per time bucket the sample with the smallest and the one with the largest
value (each at its own time), so that a one-sample spike is never averaged away; when the budget is reached the
bucket width doubles and neighbouring buckets merge (memory O(max_points) however long a run lasts).

* ``MinMaxSeries``: one line.
* ``AlignedMinMax``: several lines on one shared time axis (for a stacked chart): per bucket it keeps the rounds
  that hold the min or the max of any column or of their sum, with every column's value at those rounds.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MinMaxSeries", "AlignedMinMax"]


class MinMaxSeries:
    """Append-only (t, y) series kept as at most ``max_points`` points: min and max per time bucket.

    When full, bucket width doubles and neighbouring buckets merge (so memory is O(max_points) forever).
    Bucket ``k`` covers ``[k * bucket_s, (k + 1) * bucket_s)``. Points are real samples, never averages. The bucket
    being filled also shows its latest sample, so a live line ends at "now"; the budget accounts for it.
    """

    __slots__ = (
        "max_points",
        "bucket_s",
        "_max_buckets",
        "_closed",
        "_k",
        "_end",
        "_tmin",
        "_ymin",
        "_tmax",
        "_ymax",
        "_tlast",
        "_ylast",
        "_count",
    )

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
        self._k: int | None = None  # open bucket
        self._end = 0.0  # t at which the open bucket ends
        self._tmin = self._ymin = self._tmax = self._ymax = self._tlast = self._ylast = 0.0
        self._count = 0  # samples appended

    def append(self, t: float, y: float | None) -> None:
        """Add one point (time order); None is no point."""
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
                _, tmin, ymin, tmax, ymax = _merge(
                    merged.pop(), (ok, self._tmin, self._ymin, self._tmax, self._ymax), ok
                )
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
        """The last point, None when empty."""
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
        """{"t": [...], "y": [...]}, the kept points in time order."""
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
        self._index: dict[str, int] = {}  # column name -> position in a row's values (0 is the sum)
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
        row: list[float] = [0] * (len(self.columns) + 1)
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
        """(t, y) of the first column (the total) at each kept round."""
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
