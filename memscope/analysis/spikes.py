"""Excursions above the memory floor: spikes (a validation's, a checkpoint's, a GC sawtooth's) found in a series,
and the rolling floor under them. Pure functions over ``(t, y)`` series (seconds, bytes); standard library only."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from ._stats import _chunks, _excursions, _median_step, _phase_at, _phase_index, _prepare, _runs, _window_minima

_SPIKE_FINE_POINTS = 50_000  # find_spikes needs finer time resolution (edges refined)


@dataclass(frozen=True)
class Spike:
    """A transient excursion above the memory floor."""

    start_s: float
    end_s: float
    height_bytes: int  # peak above the local floor
    phase: str | None  # phase overlapping most of the spike, if phases were given

    def to_dict(self) -> dict[str, Any]:
        """The spike as the summary's dict."""
        return asdict(self)


def baseline(t: Sequence[float], y: Sequence[float], window_s: float) -> tuple[list[float], list[float]]:
    """Rolling floor: the minimum of ``y`` in each consecutive ``window_s`` window.

    Returns ``(times, floor)`` where each time is that of the minimum sample, so every
    floor point is a real sample and a line through them never rises above the data.
    """
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    tl, yl = _prepare(t, y)
    idx = _window_minima(tl, yl, float(window_s), float(window_s), end_anchored=False)
    return [float(tl[i]) for i in idx], [float(yl[i]) for i in idx]


PLATEAU_S = 10.0  # an excursion above the floor that lasts longer than this is a plateau (an evaluation), no spike


def excursion_words(spikes: Sequence[Mapping[str, Any]]) -> str:
    """ "3 spikes", "2 plateaus", "1 spike and 2 plateaus": excursions above the floor, named by how long they
    last (an 11-52 s evaluation is no "spike")."""
    long = sum(1 for sp in spikes if float(sp.get("end_s") or 0) - float(sp.get("start_s") or 0) > PLATEAU_S)
    short = len(spikes) - long
    words = [f"{n} {w}{'s' if n != 1 else ''}" for n, w in ((short, "spike"), (long, "plateau")) if n]
    return " and ".join(words) or "0 spikes"


def find_spikes(
    t: Sequence[float],
    y: Sequence[float],
    *,
    phases: Sequence[tuple[str, float, float]] = (),
    min_height_bytes: int | None = None,
) -> list[Spike]:
    """Transient excursions above the floor, labelled with the phase they overlap most.

    The floor here ignores phases on purpose: a validation plateau *is* a spike to
    show. Without ``min_height_bytes`` the threshold adapts to noise and spike size.
    """
    tl, yl = _prepare(t, y)
    n = len(tl)
    if n < 3 or tl[-1] <= tl[0]:
        return []
    ft, fmin, fmax, starts = _chunks(tl, yl, _SPIKE_FINE_POINTS, with_max=True)
    span = ft[-1] - ft[0]
    dt = _median_step(ft)
    w0 = max(span / 4.0, 4.0 * dt)
    floor, r, thr = _excursions(ft, fmin, fmax, w0)
    if min_height_bytes is not None:  # never miss a spike the caller asked for
        thr = min(thr, float(min_height_bytes))
    runs = _runs(r, thr)
    min_height = float(min_height_bytes) if min_height_bytes is not None else thr
    index = _phase_index(phases) if phases else None
    out: list[Spike] = []
    for a, b in runs:
        peak = max(range(a, b + 1), key=r.__getitem__)
        height = r[peak]
        if height < min_height:
            continue
        if starts is None:
            s_t, e_t = tl[a], tl[b]
        else:
            # refine chunk edges to the first/last raw sample above the floor + threshold
            lo_a, hi_a = starts[a], starts[a + 1] if a + 1 < len(starts) else n
            level = floor[a] + thr
            s_i = next((i for i in range(lo_a, hi_a) if yl[i] > level), lo_a)
            lo_b, hi_b = starts[b], starts[b + 1] if b + 1 < len(starts) else n
            level = floor[b] + thr
            e_i = next((i for i in range(hi_b - 1, lo_b - 1, -1) if yl[i] > level), hi_b - 1)
            s_t, e_t = tl[s_i], tl[e_i]
        out.append(Spike(float(s_t), float(e_t), int(round(height)), _dominant_phase(index, s_t, e_t)))
    return out


def _dominant_phase(index: Any, start: float, end: float) -> str | None:
    if index is None:
        return None
    starts, ends, names, longest = index
    overlap: dict[str, float] = {}
    # only phases starting in [start - longest, end] can overlap: bisect, not a full scan
    for i in range(bisect_left(starts, start - longest), bisect_right(starts, end)):
        o = min(ends[i], end) - max(starts[i], start)
        if o > 0:
            overlap[names[i]] = overlap.get(names[i], 0.0) + o
    if overlap:
        return max(overlap, key=overlap.__getitem__)
    return _phase_at(index, start)  # zero-length spike: the phase it sits in
