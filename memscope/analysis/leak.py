"""Tell a slow memory leak from spikes (validation, checkpoints, GC sawtooth).

Pure functions over ``(t, y)`` series: ``t`` is seconds since run start (non-decreasing),
``y`` is bytes (tree PSS or RSS). Standard library only, because this runs inside a
notebook kernel and must import fast.

Method
------
1. Downsample: long series are cut into index chunks and reduced to the chunk minimum
   (the floor is all we need, and ``min`` over list slices runs at C speed).
2. Excursions: a point is "high" when it stands above the floor on *both* sides, i.e.
   above ``max(min of the past W0, min of the next W0)``. Taking both sides means a
   leak (higher than the past but not the future) or a step is never mistaken for a
   spike, while spikes, validation plateaus and GC saw-teeth are.
3. Baseline: the floor is the minimum per window of the non-high points. The window
   is chosen adaptively as 1.5x the longest excursion, so every window reaches a
   trough even for periodic spikes or a GC sawtooth.
4. Trend: Theil-Sen slope (median of pairwise slopes, pairs subsampled to bound
   cost) with a Mann-Kendall rank test for significance. With phases, pairs are only
   formed *within* one phase type, so validation's higher floor cancels out.
5. Verdict: ``leak`` needs a positive, significant slope that is material (floor
   grows by more than max(5 MiB, 2% of the floor) over the run) and sustained (each
   half of the run rises on its own, so a one-time allocation step is not a leak).
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import phases as phases_mod
from ._stats import (  # noqa: F401 (MIN_GROWTH_FRACTION: a tunable named here too)
    _MIN_SPIKE_BYTES,
    MIN_GROWTH_FRACTION,
    PhaseIndex,
    _chunks,
    _excursions,
    _floor_points,
    _median,
    _median_step,
    _phase_at,
    _phase_index,
    _prepare,
    _runs,
    _startup_end,
    _theil_sen,
    _window_minima,
)
from .spikes import PLATEAU_S, Spike, baseline, excursion_words, find_spikes  # noqa: F401 (their old home)

__all__ = [
    "Spike",
    "LeakVerdict",
    "baseline",
    "assess_leak",
    "find_spikes",
    "assess_by_role",
    "trim_teardown",
    "fit_span",
    "reconcile",
    "part_verdicts",
    "run_verdict",
]

# --- tunables (module constants so callers/tests can see what "material" means) ---
MIN_GROWTH_BYTES = 5 * 1024 * 1024  # below this, growth is allocator jitter, not a leak
# MIN_GROWTH_FRACTION (2%: or this share of the current floor, whichever is larger) is in _stats.py, whose floor uses it too
LEAK_CONFIDENCE = 0.99  # Mann-Kendall one-sided confidence required for "leak"
HALF_CONFIDENCE = 0.90  # each half of the run must also rise on its own
HALF_SLOPE_RATIO = 0.4  # ... at no less than 40% of the overall slope
MIN_BASELINE_POINTS = 10
COARSE_WINDOWS = 16  # the coarse floor (a long run whose floor between excursions is too thin): its windows
MIN_HALF_POINTS = 4
MIN_DURATION_S = 20.0  # a verdict needs this much of the run (the fast series has ~100 points by then)
SLOW_BYTES_PER_S = 1024 * 1024  # a leak below 1 MiB/s is "slow"; above, memory plainly grows

_FINE_POINTS = 8192  # downsampled resolution for assess_leak (bounds cost on 1M points)
# For the floor only: a wobble smaller than the growth a verdict calls material (MIN_GROWTH_FRACTION) is floor, not
# an excursion. statm moves in exact steps, so between allocations most successive differences are zero and so is
# the noise estimate; every 1-4 MiB allocator wobble of a 310 MiB main then counted as an excursion, and a clean
# staircase kept 2 floor points of 106 (HF Trainer, busy machine).
_STAIR_FRACTION = 0.005  # each stair of a staircase rises by more than this share of the floor
_SEED = 0x5EED  # pair subsampling is seeded: same input, same verdict


@dataclass(frozen=True)
class LeakVerdict:
    """Result of :func:`assess_leak`.

    ``confidence`` is the one-sided Mann-Kendall confidence (0..1) that the floor is
    rising; it is reported for any verdict with data. ``baseline_start_bytes`` /
    ``baseline_end_bytes`` are the floor at the first and last sample (robust local
    levels of the first/last fifth of the run, so a step shows up as two levels).
    """

    verdict: str  # "leak" | "no_leak" | "insufficient_data"
    slope_bytes_per_s: float | None
    baseline_start_bytes: int | None
    baseline_end_bytes: int | None
    confidence: float | None
    time_to_limit_s: float | None  # only when verdict == "leak" and a limit is given
    reason: str | None = None  # with "insufficient_data": what it waits for, in plain words (see WAIT_FLOOR)
    # "processes": the tree's floor rose only with more processes alive at once, each one's own floor flat (the
    # tree's fit is kept, its verdict overruled); "parts": the tree's floor had too few points, its parts had enough
    parts: str | None = None
    detail: str | None = None  # with "insufficient_data" past the first 20 s: the fit's own condition not met yet

    @property
    def pace(self) -> str | None:
        """ "slow" or "fast" for a leak (see SLOW_BYTES_PER_S), else None."""
        if self.verdict != "leak" or self.slope_bytes_per_s is None:
            return None
        return "slow" if self.slope_bytes_per_s < SLOW_BYTES_PER_S else "fast"

    def to_dict(self) -> dict[str, Any]:
        """The verdict as the summary's dict, with its pace."""
        return dict(asdict(self), pace=self.pace)


# Past the first 20 s, every condition a verdict still waits for (floor points between spikes, in each half of the
# run, at more than one time) is one wait in the user's words: the live line cycled through them ("each half of the
# run needs 4 floor points...") while nothing the user could do differed. The condition itself is in ``detail``.
WAIT_FLOOR = "spikes still cover most of the run: it needs more time between them to see the floor; {:.0f} s so far"


def _insufficient(reason: str, detail: str | None = None) -> LeakVerdict:
    return LeakVerdict("insufficient_data", None, None, None, None, None, reason, detail=detail)


# --------------------------------------------------------------------------- helpers


# ------------------------------------------------------------------------ public API


def fit_span(
    t: Sequence[float], y: Sequence[float], start_s: float | None = None, ended: bool = False
) -> tuple[list[float], list[float]]:
    """The stretch of a series the leak verdict is fitted on: from the training's start (``start_s``, the first
    DataLoader epoch or train/eval switch: imports and set-up grow memory once, and on a short run that growth
    reads as a leak) to the end, without an ended run's teardown (``trim_teardown``). Without ``start_s``, from
    the end of the series' own start-up (``_stats._startup_end``: its first 3 s without material growth).

    A known start is kept even when less than MIN_DURATION_S of training follows it: the fit then waits for the
    training ("needs 20 s of training") rather than fitting the imports (01-quickstart's live line said "memory
    grows steadily, 12 MiB/s" at 20 s, its imports' growth, then its final card "not yet known"). The teardown is
    never trimmed below MIN_DURATION_S: what had enough time for a verdict while it ran keeps it at its end."""
    tl, yl = _prepare(t, y)
    if start_s is not None and tl:
        i = bisect_left(tl, start_s)
        tl, yl = tl[i:], yl[i:]
    elif tl:  # no training start announced: from the end of the program's start-up (its imports)
        i = _startup_end(tl, yl)
        tl, yl = tl[i:], yl[i:]
    if ended and tl:
        ct, cy = trim_teardown(tl, yl)
        if len(ct) < len(tl) and tl[-1] - tl[0] >= MIN_DURATION_S and (not ct or ct[-1] - tl[0] < MIN_DURATION_S):
            k = bisect_left(tl, tl[0] + MIN_DURATION_S) + 1
            ct, cy = tl[:k], yl[:k]
        tl, yl = ct, cy
    return tl, yl


@dataclass(frozen=True)
class FitPlan:
    """How a run's series is fitted, the same in every view (the summary, the live card, the Prometheus exporter,
    the benchmarks), so that the verdict a user watched live is the one the run ends with: from the training's
    start, without an ended run's teardown, the floor split by the main process's automatic train/eval phases."""

    start_s: float | None
    phases: tuple[tuple[str, float, float], ...]
    ended: bool = False

    def span(self, t: Sequence[float], y: Sequence[float]) -> tuple[list[float], list[float]]:
        """The part of (t, y) the leak fit looks at (the training, past its warm-up)."""
        return fit_span(t, y, self.start_s, self.ended)

    def verdict(self, t: Sequence[float], y: Sequence[float], limit_bytes: int | None = None) -> LeakVerdict:
        """The leak verdict over the planned span of (t, y)."""
        v = assess_leak(*self.span(t, y), limit_bytes=limit_bytes, phases=self.phases)
        if v.reason and self.start_s is not None:  # what it waits for is the training, not any samples
            v = replace(v, reason=v.reason.replace(" of samples;", " of training;"))
        return v


def fit_plan(
    events: Iterable[dict[str, Any]],
    end_s: float,
    main_pid: int | None = None,
    *,
    ended: bool = False,
    start_s: float | None = None,
) -> FitPlan:
    """The plan for a run whose "epoch" and "phase" events (in time order) are ``events``, up to ``end_s``.
    ``start_s``: the training's start where the caller tracked it itself (else the first DataLoader epoch or
    automatic switch of ``main_pid`` in ``events``)."""
    events = list(events)
    if start_s is None:
        start_s = phases_mod.training_start(events, main_pid)
    spans = phases_mod.intervals([e for e in events if e.get("kind", "phase") == "phase"], end_s, main_pid)
    return FitPlan(start_s, tuple(phases_mod.automatic_only(spans)), ended)


def trim_teardown(
    t: Sequence[float], y: Sequence[float], window_s: float = 5.0, max_s: float = 10.0
) -> tuple[list[float], list[float]]:
    """An ended run's series without its teardown: the longest tail (of at most ``max_s``) that lies wholly below
    everything of the ``window_s`` before it (the interpreter freeing at exit), with the descent into it. A floor
    that ends in a fall it never had before is no floor: it would make the run's last seconds look like one long
    spike."""
    tl, yl = _prepare(t, y)
    n = len(tl)
    if n < 4 or tl[-1] - tl[0] < 2 * window_s + max_s:
        return tl, yl
    cut = n
    tail_max = -math.inf
    j = n - 1
    while j > 0 and tl[-1] - tl[j] <= max_s:
        tail_max = max(tail_max, yl[j])
        a = bisect_left(tl, tl[j] - window_s, 0, j)
        if a < j and tail_max < min(yl[a:j]):
            cut = j
        j -= 1
    # The fall into it, too: freeing takes a few rounds, and a descent left in would read as the end of a spike
    # (the last stair of a staircase, cut short by it, was taken for an excursion).
    while n > cut > 1 and yl[cut - 1] > yl[cut] and tl[-1] - tl[cut - 1] <= max_s:
        cut -= 1
    return tl[:cut], yl[:cut]


def assess_leak(
    t: Sequence[float],
    y: Sequence[float],
    *,
    limit_bytes: int | None = None,
    phases: Sequence[tuple[str, float, float]] = (),
    min_duration_s: float = MIN_DURATION_S,
) -> LeakVerdict:
    """Is the memory floor growing steadily (a leak), or is it spikes over a flat floor?

    ``phases`` are ``(name, start_s, end_s)`` intervals; when given, the floor is fitted
    per phase type so that e.g. validation's higher floor does not read as growth.
    An ``insufficient_data`` verdict says in ``reason`` which condition is not met yet.
    """
    tl, yl = _prepare(t, y)
    have = tl[-1] - tl[0] if len(tl) >= 2 else 0.0
    if len(tl) < 3 or have < min_duration_s:
        return _insufficient(f"a verdict needs {min_duration_s:g} s of samples; {have:.0f} s so far")
    span = float(tl[-1]) - float(tl[0])
    index = _phase_index(phases) if phases else None
    ft, fy, _, _ = _chunks(tl, yl, _FINE_POINTS)
    by_phase = _split_by_phase(ft, fy, index)
    groups, weight = _floor_groups(by_phase, span)
    fine: _Groups | None = None
    if _points(groups) < MIN_BASELINE_POINTS and span >= 2 * min_duration_s:
        fine = groups
        groups, weight = _floor_groups(by_phase, span, coarse=True)
    n_points = _points(groups)
    if n_points < MIN_BASELINE_POINTS:
        return _insufficient(
            WAIT_FLOOR.format(span),
            f"the floor between spikes has {n_points} points over {span:.0f} s; a verdict needs {MIN_BASELINE_POINTS}",
        )
    rng = random.Random(_SEED)
    fit = _theil_sen(list(groups.values()), rng)
    if fit is None:
        return _insufficient(WAIT_FLOOR.format(span), "the floor's points all share one time: no slope yet")
    fits = _half_fits(groups, rng)
    if isinstance(fits, LeakVerdict):
        return replace(fits, reason=WAIT_FLOOR.format(span))
    # The phase type covering most samples, among those with a floor of their own (3 floor points under long
    # evaluations on a loaded machine gave no rise of their own to tell, while the training had 147).
    dominant = max(weight, key=lambda k: (len(groups[k][0]) >= 6, weight[k]))
    stairs = index is not None and _staircase(*by_phase[dominant], index, dominant)
    sustained = stairs or _sustained(fit, fits) or _dominant_sustained(groups, dominant, rng)
    start_level, end_level, material = _levels(*groups[dominant], float(tl[0]), float(tl[-1]), fit.slope, sustained)
    least = max(MIN_GROWTH_BYTES, MIN_GROWTH_FRACTION * abs(end_level))
    is_leak = fit.slope > 0 and fit.confidence >= LEAK_CONFIDENCE and sustained
    is_leak = is_leak and (stairs or material) and fit.slope * span > least
    if is_leak and fine and not stairs and _fine_floor_held(fine, fit.slope, rng):
        is_leak = False
    return LeakVerdict(
        verdict="leak" if is_leak else "no_leak",
        slope_bytes_per_s=float(fit.slope),
        baseline_start_bytes=int(round(start_level)),
        baseline_end_bytes=int(round(end_level)),
        confidence=float(fit.confidence),
        time_to_limit_s=_time_to_limit(limit_bytes, end_level, fit.slope) if is_leak else None,
    )


def _fine_floor_held(fine: _Groups, slope: float, rng: random.Random) -> bool:
    """Under a coarse floor: the true floor between excursions (the fine points, too few for a verdict of their
    own) held in one half of the run, rising there at less than HALF_SLOPE_RATIO of the coarse fit's ``slope``.
    Coarse windows shorter than a sawtooth's period read its teeth as a rising floor (an LSTM's 60 MiB sawtooth
    every 8 s, its troughs at 233 MiB for 30 s then at 251: "slow leak"); a main whose floor rose 2 MiB in 60 s
    beside new DataLoader workers read "+5 MiB/min" from its coarse windows."""
    g0 = min(g[0][0] for g in fine.values())
    g1 = max(g[0][-1] for g in fine.values())
    mid = g0 + (g1 - g0) / 2.0
    for first in (True, False):
        half = []
        for bt, by in fine.values():
            k = bisect_left(bt, mid)
            half.append((bt[:k], by[:k]) if first else (bt[k:], by[k:]))
        if sum(len(h[0]) for h in half) < 2:
            continue  # too few to say it held
        f = _theil_sen(half, rng)
        if f is not None and f.slope < HALF_SLOPE_RATIO * slope:
            return True
    return False


def _sustained(fit: Any, fits: list[Any]) -> bool:
    """Each half of the run rises on its own, confidently, at no less than HALF_SLOPE_RATIO of the whole's slope."""
    return all(
        f.slope > 0 and f.slope >= HALF_SLOPE_RATIO * fit.slope and f.confidence >= HALF_CONFIDENCE for f in fits
    )


def _dominant_sustained(groups: _Groups, dominant: str | None, rng: random.Random) -> bool:
    """With phases: the dominant phase type (the training) rises in each half on its own, confidently. Long
    evaluations on a loaded machine (a 1 GiB validation took 13 s to fill) leave the other type's floor points
    on their ramps, and their pairs sank the halves test of a main keeping 0.7 MiB/s."""
    if len(groups) < 2:
        return False
    own = {dominant: groups[dominant]}
    fit = _theil_sen(list(own.values()), rng)
    fits = _half_fits(own, rng)
    return fit is not None and fit.confidence >= LEAK_CONFIDENCE and isinstance(fits, list) and _sustained(fit, fits)


def _time_to_limit(limit_bytes: int | None, level: float, slope: float) -> float | None:
    return None if limit_bytes is None or slope <= 0 else max(0.0, (float(limit_bytes) - level) / slope)


_Groups = dict[str | None, tuple[list[float], list[float]]]


def _points(groups: _Groups) -> int:
    return sum(len(g[0]) for g in groups.values())


def _split_by_phase(ft: list[float], fy: list[float], index: Any) -> _Groups:
    """The downsampled points by phase type (None: outside any phase)."""
    if index is None:
        return {None: (ft, fy)}
    by_phase: _Groups = {}
    for x, v in zip(ft, fy):
        g = by_phase.setdefault(_phase_at(index, x), ([], []))
        g[0].append(x)
        g[1].append(v)
    return by_phase


def _floor_groups(by_phase: _Groups, span: float, coarse: bool = False) -> tuple[_Groups, dict[str | None, int]]:
    """Each phase type's floor points, and how many samples the type covers (its weight). A phase type seen only
    in one short stretch (e.g. a final eval) says nothing about growth across the run: its pairs would only add
    within-phase noise. ``coarse``: the lowest point of each COARSE_WINDOWS-th of the span, for a run twice as
    long as a verdict needs whose floor wobbles by more than a wobble (a main whose own memory moved 216 -> 227
    -> 218 MiB in steps read every stretch above a later fall as an excursion: 7 floor points in 60 s, "not yet
    known" at the end)."""
    groups: _Groups = {}
    weight: dict[str | None, int] = {}
    for name, (gt_, gy) in by_phase.items():
        if len(gt_) < 3 or gt_[-1] - gt_[0] < 0.5 * span:
            continue
        if coarse:
            w = span / COARSE_WINDOWS
            idx = _window_minima(gt_, gy, w, w, end_anchored=False)
            bt, by = [gt_[i] for i in idx], [gy[i] for i in idx]
        else:
            bt, by = _floor_points(gt_, gy)
        if len(bt) >= 3:
            groups[name] = (bt, by)
            weight[name] = len(gt_)
    return groups, weight


def _half_fits(groups: _Groups, rng: random.Random) -> "list[Any] | LeakVerdict":
    """The fits of each half of the stretch the groups cover: a leak rises in both; a one-time step rises in at
    most one. With phases, the time before the first one (imports, set-up) is in no group."""
    g0 = min(g[0][0] for g in groups.values())
    g1 = max(g[0][-1] for g in groups.values())
    mid = g0 + (g1 - g0) / 2.0
    halves: list[_Groups] = [{}, {}]
    for name, (bt, by) in groups.items():
        k = bisect_left(bt, mid)
        halves[0][name] = (bt[:k], by[:k])
        halves[1][name] = (bt[k:], by[k:])
    if any(sum(len(g[0]) for g in h.values()) < MIN_HALF_POINTS for h in halves):
        return _insufficient(
            "",
            f"each half of the run needs {MIN_HALF_POINTS} floor points between spikes to tell a leak from a "
            "one-time step; one half has fewer so far",
        )
    fits = [_theil_sen(list(h.values()), rng) for h in halves]
    if fits[0] is None or fits[1] is None:
        return _insufficient("", "one half of the run has no slope yet")
    return fits


def _levels(
    bt: list[float], by: list[float], t0: float, t1: float, slope: float, sustained: bool
) -> tuple[float, float, bool]:
    """The floor's start and end levels, from the dominant phase type (the one covering most samples), and whether
    its own rise is material.

    The levels are the median of its floor points in the first/last fifth of the run. Local medians (not a line's
    intercept) keep a step visible as two levels; they are moved to the ends along the slope only when the trend
    is real (sustained), never for an artefact. At least three points each where there are six; with fewer (a
    phase whose floor is mostly excursions, seen: a busy HF Trainer's training with 3), the first points and the
    last, never one set shared.

    Material: the floor's own rise from its first fifth to its last, carried to the whole span (a slope fitted over
    a ramp at the training's start can exceed what the floor gained). Fewer than six floor points tell no rise of
    their own (one of three may be the warm-up, before the first optimizer step: seen on a HF Trainer without a
    leak); a staircase's material growth is its own rule's."""
    span = t1 - t0
    edge = span / 5.0
    n = len(bt)
    k0 = max(min(3, n // 2), bisect_left(bt, t0 + edge))
    k1 = min(max(n - 3, n - n // 2), bisect_right(bt, t1 - edge))
    trend = slope if sustained else 0.0
    start_level = _median([v - trend * (x - t0) for x, v in zip(bt[:k0], by[:k0])])
    end_level = _median([v - trend * (x - t1) for x, v in zip(bt[k1:], by[k1:])])
    least = max(MIN_GROWTH_BYTES, MIN_GROWTH_FRACTION * abs(end_level))
    apart = _median(bt[k1:]) - _median(bt[:k0])
    rise = (_median(by[k1:]) - _median(by[:k0])) * (span / apart if apart > 0 else 1.0)
    return start_level, end_level, n >= 6 and rise > least


def reconcile(tree: LeakVerdict, parts: Mapping[str, LeakVerdict]) -> LeakVerdict:
    """The run's verdict: the tree's, made to agree with its parts (:func:`part_verdicts`: the main process's own
    private memory, and each other role's processes one by one).

    A leak is a sustained rise of some process's own memory. The tree's floor also rises when more processes are
    alive at once (an evaluation's DataLoader workers beside the training's, a second loader): seen on a clean
    Hugging Face Trainer, the tree called "a slow leak, 20 MiB/min" while the main and the workers each said
    no_leak. So where the tree says leak and every part with a verdict says no_leak, the main's among them, the
    run has no leak; where the tree cannot tell yet but its parts can, the parts decide. A run of one process
    (only "main") is its tree: nothing to reconcile."""
    if len(parts) < 2 or any(v.verdict == "leak" for v in parts.values()):
        return tree
    main = parts.get("main")
    if main is None or main.verdict != "no_leak":
        return tree  # the main's own memory is the first suspect: without its verdict, the tree's stands
    if tree.verdict == "leak":
        return replace(tree, verdict="no_leak", time_to_limit_s=None, parts="processes")
    if tree.verdict == "insufficient_data":
        return replace(main, time_to_limit_s=None, parts="parts")
    return tree


def part_verdicts(
    plan: "FitPlan",
    main_own: tuple[Sequence[float], Sequence[float]] | None,
    processes: Mapping[int, tuple[str, Sequence[float], Sequence[float]]],
) -> dict[str, LeakVerdict]:
    """The parts :func:`reconcile` weighs, fitted by ``plan``: "main" on the main process's own private memory
    (``main_own``), and each other role on its processes one by one (``processes``: pid -> (role, t, private)).
    A role leaks when one of its processes does (that one's verdict is the role's), has no leak when some of them
    lived long enough for a verdict and none leaks. A process is judged alone, never in a sum or a mean over its
    role: those move whenever a process of the role is born or exits (a mean fell 46 -> 36 MiB as young workers
    joined older ones)."""
    out: dict[str, LeakVerdict] = {}
    if main_own is not None and len(main_own[0]):
        out["main"] = plan.verdict(*main_own)
    for role, t, y in processes.values():
        if role == "main" or len(t) < 3 or t[-1] - t[0] < MIN_DURATION_S:
            continue
        v = plan.verdict(t, y)
        have = out.get(role)
        if (
            have is None
            or (
                v.verdict == "leak"
                and (have.verdict != "leak" or (v.slope_bytes_per_s or 0) > (have.slope_bytes_per_s or 0))
            )
            or (have.verdict == "insufficient_data" and v.verdict == "no_leak")
        ):
            out[role] = v
    return out


def run_verdict(
    plan: "FitPlan",
    tree: tuple[Sequence[float], Sequence[float]],
    main_own: tuple[Sequence[float], Sequence[float]] | None,
    processes: Mapping[int, tuple[str, Sequence[float], Sequence[float]]],
    limit_bytes: int | None = None,
) -> tuple[LeakVerdict, dict[str, LeakVerdict]]:
    """The run's leak verdict and its parts, the same in the live line and the final card: the tree's private
    memory fitted by ``plan``, reconciled with its parts (:func:`part_verdicts`, :func:`reconcile`)."""
    parts = part_verdicts(plan, main_own, processes)
    return reconcile(plan.verdict(*tree, limit_bytes), parts), parts


def _mib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def floor_words(verdict: Mapping[str, object], fmt: Callable[[int], str] = _mib) -> str:
    """What a ``no_leak`` verdict says of the floor, in the words every view uses (sizes by ``fmt``)."""
    a, b = verdict.get("baseline_start_bytes"), verdict.get("baseline_end_bytes")
    if verdict.get("parts") == "processes":
        rise = b - a if isinstance(a, int) and isinstance(b, int) and b > a else 0
        by = f" {fmt(rise)}" if rise >= 2**20 else ""
        return (
            f"each process's own floor is flat; the tree's rose{by} only with more processes alive at once "
            "(e.g. an evaluation's DataLoader workers beside the training's)"
        )
    if verdict.get("parts") == "parts":
        return "each process's own floor is flat"
    step = floor_step(verdict)
    return f"the floor stepped up {fmt(step)} once, then held" if step else "the floor is flat"


def floor_step(verdict: Mapping[str, object]) -> int | None:
    """For a ``no_leak`` verdict (``LeakVerdict.to_dict()``): how much the floor rose between the run's first
    and last fifth when that is more than growth a verdict would call material, else None. A floor that stepped
    up once and held is no leak, and no flat floor either (nor is a staircase's first stair, live)."""
    a, b = verdict.get("baseline_start_bytes"), verdict.get("baseline_end_bytes")
    if verdict.get("verdict") != "no_leak" or verdict.get("parts") or not isinstance(a, int) or not isinstance(b, int):
        return None
    step = b - a
    return step if step > max(MIN_GROWTH_BYTES, MIN_GROWTH_FRACTION * abs(b)) else None


def _staircase(gt: list[float], gy: list[float], index: PhaseIndex, name: str | None) -> bool:
    """A staircase: memory kept at phase switches (seed 002: each validation keeps its outputs), seen in the
    levels of the dominant phase's (training's) stretches. The halves test misses it when a short run holds two or
    three evaluations: a half with one stair in it has a median pairwise slope of about zero.

    It is one when the floor rose at two switches or more, still rose at the last one, and what it gained from
    the first stretch to the last is material without its largest stair (a one-time step, or a warm-up that
    settled, is not a leak). Falls between stretches are allowed: the tree's floor drops whenever a DataLoader's
    workers exit (seen: a Hugging Face Trainer's tree fell 111 MiB at an eval loader's exit, its main leaking
    all along; "higher at every switch" called that run no_leak). A stretch's level is the lower quartile of its
    own samples (``gt``, ``gy``: all of the phase's, not its floor points): its last stretch may be a second long
    before the run ends, too short for a floor window, and the quartile ignores a spike or the first of the
    teardown."""
    if name is None:
        return False
    starts, ends, names, _ = index
    levels = []
    for a, b, n in zip(starts, ends, names):
        if n == name:
            pts = sorted(gy[bisect_left(gt, a) : bisect_left(gt, b)])
            if len(pts) >= 3:
                levels.append(pts[len(pts) // 4])
    if len(levels) < 3:
        return False
    stair = max(_MIN_SPIKE_BYTES, _STAIR_FRACTION * abs(levels[-1]))
    least = max(MIN_GROWTH_BYTES, MIN_GROWTH_FRACTION * abs(levels[-1]))
    rises = [b - a for a, b in zip(levels, levels[1:])]
    return sum(r > stair for r in rises) >= 2 and rises[-1] > stair and levels[-1] - levels[0] - max(rises) > least


def assess_by_role(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    limit_bytes: int | None = None,
    phases: Sequence[tuple[str, float, float]] = (),
) -> dict[str, LeakVerdict]:
    """:func:`assess_leak` per role (e.g. main, dataloader workers).

    Roles must be disjoint parts of one process tree sharing ``limit_bytes``: the
    time to limit of a leaking role is when the *sum* of all roles' floors reaches the
    limit at the combined rate of the leaking roles (the tree OOMs, not the role).
    """
    out = {role: assess_leak(t, y, phases=phases) for role, (t, y) in series.items()}
    if limit_bytes is None:
        return out
    leaking = [v for v in out.values() if v.verdict == "leak"]
    rate = sum(v.slope_bytes_per_s or 0.0 for v in leaking)
    if rate <= 0:
        return out
    used = sum(v.baseline_end_bytes for v in out.values() if v.baseline_end_bytes is not None)
    ttl = max(0.0, (float(limit_bytes) - used) / rate)
    return {role: replace(v, time_to_limit_s=ttl) if v.verdict == "leak" else v for role, v in out.items()}
