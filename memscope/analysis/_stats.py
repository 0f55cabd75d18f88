"""The statistics under the leak verdict and the spikes: floors over windows, excursions above them, and a
Theil-Sen fit over groups of points. Private to analysis/leak.py (which names the tunables that say what is
material); pure Python, no numpy, so that it imports fast in a notebook kernel."""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import islice
from operator import gt
from typing import Literal, Sequence, overload

MIN_GROWTH_FRACTION = 0.02  # growth below 2% of the current floor is no leak (leak.py's tunable; its wobble here)
_MAX_WINDOWS = 200  # caps baseline points (~2x this with half-overlapping windows)
_MAX_PAIRS = 20_000  # Theil-Sen pair budget
_NOISE_SIGMAS = 7.0  # r is a difference of noisy samples: 7 sigma keeps noise out
_MIN_SPIKE_BYTES = 1024 * 1024  # excursions smaller than 1 MiB are noise
_MIN_SPIKE_FRACTION = 0.0025  # ... or 0.25% of the floor (jitter scales with size)
_FLOOR_WOBBLE_FRACTION = MIN_GROWTH_FRACTION


# (starts, ends, names, longest) of phases sorted by start (_phase_index)
PhaseIndex = tuple[list[float], list[float], list[str], float]


def _as_list(v: Sequence[float]) -> list[float]:
    if isinstance(v, list):
        return v
    tolist = getattr(v, "tolist", None)  # numpy/array.array without importing numpy
    if tolist is not None:
        out = tolist()
        if isinstance(out, list):
            return out
    return list(v)


def _prepare(t: Sequence[float], y: Sequence[float]) -> tuple[list[float], list[float]]:
    """Lists, finite values only, sorted by time. Fast path costs a few C-level passes."""
    tl, yl = _as_list(t), _as_list(y)
    if len(tl) != len(yl):
        raise ValueError(f"t and y differ in length ({len(tl)} != {len(yl)})")
    # sum() propagates NaN/inf, so one C-speed pass tells whether filtering is needed.
    if tl and not (math.isfinite(sum(tl)) and math.isfinite(sum(yl))):
        pairs = [(a, b) for a, b in zip(tl, yl) if math.isfinite(a) and math.isfinite(b)]
        tl, yl = [a for a, _ in pairs], [b for _, b in pairs]
    if any(map(gt, tl, islice(tl, 1, None))):  # samplers may deliver out of order
        pairs = sorted(zip(tl, yl), key=lambda p: p[0])
        tl, yl = [a for a, _ in pairs], [b for _, b in pairs]
    return tl, yl


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return float(s[mid]) if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def _quantile_sorted(s: Sequence[float], q: float) -> float:
    return float(s[int(q * (len(s) - 1))]) if s else 0.0


def _median_step(t: Sequence[float]) -> float:
    steps = [b - a for a, b in zip(t, islice(t, 1, None)) if b > a]
    return _median(steps) if steps else 0.0


@overload
def _chunks(
    t: list[float], y: list[float], max_points: int, with_max: Literal[True]
) -> tuple[list[float], list[float], list[float], list[int] | None]: ...
@overload
def _chunks(
    t: list[float], y: list[float], max_points: int, with_max: Literal[False] = False
) -> tuple[list[float], list[float], None, list[int] | None]: ...
def _chunks(
    t: list[float], y: list[float], max_points: int, with_max: bool = False
) -> tuple[list[float], list[float], list[float] | None, list[int] | None]:
    """Reduce to <= max_points chunks: (time of chunk min, chunk min, chunk max, chunk start idx)."""
    n = len(y)
    k = -(-n // max_points)
    if k <= 1:
        return t, y, (y if with_max else None), None
    ft: list[float] = []
    fy: list[float] = []
    fmax: list[float] = []
    starts: list[int] = []
    for i in range(0, n, k):
        seg = y[i : i + k]
        m = min(seg)
        ft.append(t[i + seg.index(m)])  # time of the minimum: a real floor sample
        fy.append(m)
        if with_max:
            fmax.append(max(seg))
        starts.append(i)
    return ft, fy, (fmax if with_max else None), starts


def _back_min(t: list[float], y: list[float], w: float) -> list[float]:
    """min(y[j]) over t[i]-w <= t[j] <= t[i] (monotonic deque, O(n))."""
    out = [0.0] * len(y)
    dq: deque[int] = deque()
    for i, yi in enumerate(y):
        while dq and y[dq[-1]] >= yi:
            dq.pop()
        dq.append(i)
        lim = t[i] - w
        while t[dq[0]] < lim:
            dq.popleft()
        out[i] = y[dq[0]]
    return out


def _fwd_min(t: list[float], y: list[float], w: float) -> list[float]:
    """min(y[j]) over t[i] <= t[j] <= t[i]+w."""
    n = len(y)
    out = [0.0] * n
    dq: deque[int] = deque()
    for i in range(n - 1, -1, -1):
        yi = y[i]
        while dq and y[dq[-1]] >= yi:
            dq.pop()
        dq.append(i)
        lim = t[i] + w
        while t[dq[0]] > lim:
            dq.popleft()
        out[i] = y[dq[0]]
    return out


def _excursions(
    ft: list[float], fmin: list[float], fval: list[float], w0: float, min_fraction: float = _MIN_SPIKE_FRACTION
) -> tuple[list[float], list[float], float]:
    """Floor, residual of ``fval`` above the floor, and an adaptive "high" threshold.

    The floor is max(past-min, future-min): a point is only "above the floor" if memory
    was lower both before and after it, which is what a spike is and a leak is not.
    """
    back = _back_min(ft, fmin, w0)
    fwd = _fwd_min(ft, fmin, w0)
    floor = [b if b > f else f for b, f in zip(back, fwd)]
    r = [v - f for v, f in zip(fval, floor)]
    diffs = [abs(b - a) for a, b in zip(fmin, islice(fmin, 1, None))]
    # Robust noise from the 20th percentile of successive differences (|N(0, 2s^2)| has its 20th percentile at
    # 0.2533*sqrt(2)*s): the median would be swamped when spikes are dense (one sample in three).
    sigma = _quantile_sorted(sorted(diffs), 0.20) / (0.2533 * math.sqrt(2.0)) if diffs else 0.0
    rs = sorted(r)
    q10, q95 = _quantile_sorted(rs, 0.10), _quantile_sorted(rs, 0.95)
    level = abs(_median(fmin))
    # Well above noise, and above a tenth of the typical excursion so that slow
    # wander under big spikes is not cut into many short "spikes".
    thr = q10 + max(_NOISE_SIGMAS * sigma, 0.1 * (q95 - q10), _MIN_SPIKE_BYTES, min_fraction * level)
    return floor, r, thr


def _runs(r: list[float], thr: float) -> list[tuple[int, int]]:
    """(first, last) index of each run of r > thr; a single dipping sample does not split."""
    runs: list[tuple[int, int]] = []
    start = last = -1
    for i, ri in enumerate(r):
        if ri > thr:
            if start < 0:
                start = i
            elif i - last > 2:
                runs.append((start, last))
                start = i
            last = i
    if start >= 0:
        runs.append((start, last))
    return runs


def _window_minima(t: list[float], y: list[float], window_s: float, step_s: float, end_anchored: bool) -> list[int]:
    """Sorted, de-duplicated index of the minimum in each window."""
    if not t:
        return []
    t0, t1 = t[0], t[-1]
    if end_anchored:
        starts = []
        s = t0
        while s + window_s < t1:
            starts.append(s)
            s += step_s
        # the last window ends at the last sample: a spike in progress is never the floor
        starts.append(max(t0, t1 - window_s))
        right = bisect_right
    else:
        starts = [t0 + k * window_s for k in range(int((t1 - t0) // window_s) + 1)]
        right = bisect_left  # half-open [s, s + window_s)
    idx: list[int] = []
    seen = set()
    for s in starts:
        a = bisect_left(t, s)
        b = right(t, s + window_s)
        if a >= b:
            continue
        seg = y[a:b]
        j = a + seg.index(min(seg))
        if j not in seen:
            seen.add(j)
            idx.append(j)
    idx.sort()
    return idx


def _floor_points(ft: list[float], fy: list[float]) -> tuple[list[float], list[float]]:
    """Baseline points (time of min, min) for one phase type, with adaptive window."""
    n = len(ft)
    if n < 3:
        return [], []
    span = ft[-1] - ft[0]
    dt = _median_step(ft)
    if span <= 0 or dt <= 0:
        return [], []
    # W0 must exceed the longest spike or its middle would not look high; a quarter of
    # the span is safe for periodic spikes and harmless for trends (see _excursions).
    w0 = max(span / 4.0, 4.0 * dt)
    _, r, thr = _excursions(ft, fy, fy, w0, _FLOOR_WOBBLE_FRACTION)
    runs = _runs(r, thr)
    # A window 1.5x the typical excursion contains a trough (also for saw-teeth). Typical, not longest: two spikes
    # merged over a one-sample trough (or an excursion still open at the last sample, which has no known length)
    # would widen every window and leave too few floor points. Windows inside an excursion hold no candidate and
    # are skipped, so a long one costs nothing.
    lengths = sorted(ft[b] - ft[a] + dt for a, b in runs if b < n - 1)
    typical = lengths[(3 * len(lengths)) // 4] if lengths else 0.0
    w = max(1.5 * typical, 3.0 * dt, span / _MAX_WINDOWS)
    keep = [True] * n
    for a, b in runs:  # drop excursions (+1 sample of their flanks) from floor candidates
        for i in range(max(0, a - 1), min(n, b + 2)):
            keep[i] = False
    ct = [x for x, k in zip(ft, keep) if k]
    cy = [v for v, k in zip(fy, keep) if k]
    idx = _window_minima(ct, cy, w, w / 2.0, end_anchored=True)
    return [ct[i] for i in idx], [cy[i] for i in idx]


class _Fit:
    __slots__ = ("slope", "z", "n")

    def __init__(self, slope: float, z: float, n: int) -> None:
        self.slope, self.z, self.n = slope, z, n

    @property
    def confidence(self) -> float:
        return 0.5 * (1.0 + math.erf(self.z / math.sqrt(2.0)))


def _theil_sen(groups: list[tuple[list[float], list[float]]], rng: random.Random) -> _Fit | None:
    """Stratified Theil-Sen slope + Mann-Kendall z; pairs never cross phase types."""
    groups = [g for g in groups if len(g[0]) >= 2]
    if not groups:
        return None
    sizes = [len(g[0]) for g in groups]
    pair_counts = [m * (m - 1) // 2 for m in sizes]
    total = sum(pair_counts)
    slopes: list[float] = []
    if total <= _MAX_PAIRS:
        for gt_, gy in groups:
            m = len(gt_)
            for i in range(m - 1):
                ti, yi = gt_[i], gy[i]
                for j in range(i + 1, m):
                    d = gt_[j] - ti
                    if d > 0:
                        slopes.append((gy[j] - yi) / d)
    else:
        cum = []
        acc = 0
        for c in pair_counts:
            acc += c
            cum.append(acc)
        rand = rng.random
        for _ in range(_MAX_PAIRS):
            g = bisect_right(cum, rand() * total)
            gt_, gy = groups[min(g, len(groups) - 1)]
            m = len(gt_)
            i = int(rand() * m)
            j = int(rand() * (m - 1))
            if j >= i:
                j += 1
            else:
                i, j = j, i
            d = gt_[j] - gt_[i]
            if d > 0:
                slopes.append((gy[j] - gy[i]) / d)
    if not slopes:
        return None
    slopes.sort()
    ns = len(slopes)
    neg = bisect_left(slopes, 0.0)
    pos = ns - bisect_right(slopes, 0.0)
    s_stat = (pos - neg) * total / ns  # Mann-Kendall S, scaled up from the sample
    var = sum(m * (m - 1) * (2 * m + 5) for m in sizes) / 18.0
    z = s_stat / math.sqrt(var) if var > 0 else 0.0
    return _Fit(_median(slopes), z, sum(sizes))


def _phase_index(phases: Sequence[tuple[str, float, float]]) -> PhaseIndex:
    """(starts, ends, names, longest) sorted by start; intervals are [start, end)."""
    ph = sorted((float(s), float(e), str(n)) for n, s, e in phases)
    longest = max((e - s for s, e, _ in ph), default=0.0)
    return [p[0] for p in ph], [p[1] for p in ph], [p[2] for p in ph], longest


def _phase_at(index: PhaseIndex, x: float) -> str | None:
    starts, ends, names, _ = index
    i = bisect_right(starts, x) - 1
    if i >= 0 and x < ends[i]:
        return names[i]
    return None


STARTUP_CALM_S = 3.0  # the program's start-up ends where its memory first holds this long ...
STARTUP_MAX_SHARE = 1 / 3  # ... within this first share of the series


def _startup_end(t: list[float], y: list[float]) -> int:
    """Index where a series' start-up ends: its first sample from which memory rises less than the growth a
    verdict calls material (2%, 2 MiB at least) over the next STARTUP_CALM_S. A program's imports and its model's
    construction climb steeply and once; fitted as training, they read as a leak or as a one-time step (plain
    torch announces no training start: a sawtooth's 16 s of imports, 1 -> 283 MiB, read "a slow leak"). A series
    that holds still only late (spikes every 2 s from the start), or that did not climb first, has no start-up to
    cut (0)."""
    n = len(t)
    j = 0
    for i in range(n):
        j = max(j, i)
        while j + 1 < n and t[j + 1] - t[i] <= STARTUP_CALM_S:
            j += 1
        if t[j] - t[i] < STARTUP_CALM_S * 0.8:
            break  # too close to the end to tell
        if t[i] - t[0] > STARTUP_MAX_SHARE * (t[-1] - t[0]):
            break  # a start-up is the run's beginning, never a calm moment found late between spikes
        tol = max(2 * 1024 * 1024, MIN_GROWTH_FRACTION * abs(y[i]))
        if max(y[i : j + 1]) - y[i] <= tol:
            return i if y[i] - min(y[: i + 1]) > tol else 0  # it climbed to get there: else nothing to cut
    return 0
