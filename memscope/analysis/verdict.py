"""The run's leak verdict and growth kind from its record's series, the same for the summary, the live line and a
replay: the series read once (``read_inputs``), cut at any moment (``Inputs.upto``), and judged (``judge``)."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..model import KIND_PSS, KIND_RSS
from ..record.reader import RunData
from . import copy_on_read as cor_mod
from . import phases as phases_mod
from .growth import Evidence, Growth, Stairs, stairs
from .growth import judge as judge_growth
from .leak import FitPlan, LeakVerdict, fit_plan, part_verdicts
from .spikes import PLATEAU_S, Spike, find_spikes

Series = tuple[list[float], list[float]]
STARTUP_SHARE = 0.3  # without a known training start, a rise in this first share of the run is its start-up
RAMP_S = 8.0  # a floor that took longer than this to rise (10% to 90% of it) warmed up: no step ...
RAMP_HELD = 1.0  # ... unless it then held at least as long as it took to rise (x this): a gradual step
STEP_HELD_S = 20.0  # live, a step is one once the floor has held its new level this long (and a third of the fit)
_EVAL_WORDS = ("eval", "valid", "val", "test")


def _cut(s: Series, end: float) -> Series:
    k = bisect_right(s[0], end)
    return s[0][:k], s[1][:k]


@dataclass(frozen=True)
class Inputs:
    """What the verdict is fitted on: the tree's private floor (``tree``), the tree's PSS for its spikes
    (``total``), the main's own private memory, each process's private floor (pid -> role, t, y), the phase and
    epoch events in time order, the processes alive per moment, and the run's length so far."""

    tree: Series
    total: Series
    own: Series | None
    procs: Mapping[int, tuple[str, list[float], list[float]]]
    events: Sequence[dict[str, Any]]
    counts: Series
    main_pid: int | None
    duration: float
    limit_bytes: int | None = None
    series: str = "tree_private"
    copy_on_read: Mapping[str, Any] | None = None  # copy_on_read.assess's finding on the same record (or prefix)

    def upto(self, end: float) -> "Inputs":
        """The inputs as they were ``end`` seconds into the run (a replay of the live line)."""
        procs = {}
        for pid, (role, t, y) in self.procs.items():
            ct, cy = _cut((t, y), end)
            if ct:
                procs[pid] = (role, ct, cy)
        return replace(
            self,
            tree=_cut(self.tree, end),
            total=_cut(self.total, end),
            own=_cut(self.own, end) if self.own else None,
            procs=procs,
            events=[e for e in self.events if e["t"] <= end],
            counts=_cut(self.counts, end),
            duration=min(self.duration, end),
        )


@dataclass(frozen=True)
class Judgment:
    """The verdict, its parts' verdicts, its kind of growth (None while insufficient), and the plan it used."""

    verdict: LeakVerdict
    parts: dict[str, LeakVerdict]
    growth: Growth | None
    plan: FitPlan
    spikes: list[Spike] = field(default_factory=list)
    # While the run goes: why its answer is not one yet, in words ("a step needs to hold"), else None.
    provisional: str | None = None


def read_inputs(
    rd: RunData, main_pid: int | None, duration: float, limit_bytes: int | None = None, live: bool = False
) -> Inputs:
    """The record's series the verdict needs. ``live``: the tree's PSS read per bucket's highest round (its spikes),
    not every round."""
    window = rd.fit_window()
    bucket = max(0.2, duration / 4000, window)
    events = sorted(rd.events("epoch") + rd.events("phase"), key=lambda e: e["t"])
    fast = rd.fast_totals() if not live else rd.fast_highs(bucket)
    if fast:
        rows = rd.fast_totals(private=True, floor_s=window)
        own = rd.role_fast_total("main", column="private", floor_s=window)
        return Inputs(
            tree=([r[0] for r in rows], [float(r[1] or 0) for r in rows]),
            total=([r[0] for r in fast], [float(r[1] or 0) for r in fast]),
            own=own,
            procs=rd.process_fast_floors(bucket),
            events=events,
            counts=_unzip(rd.alive_counts(bucket)),
            main_pid=main_pid,
            duration=duration,
            limit_bytes=limit_bytes,
            copy_on_read=assess_copy_on_read(rd) if live else None,
        )
    # An older record without the fast series: its PSS rounds (private part), else its RSS rounds.
    kind = KIND_PSS if rd.tree_peak(KIND_PSS) else KIND_RSS
    total = _unzip(rd.tree_totals(kind))
    tree = _unzip(rd.tree_totals(kind, private=True)) if kind == KIND_PSS else total
    series = "tree_private_pss_rounds" if kind == KIND_PSS else "tree_rss"
    return Inputs(tree, total, None, {}, events, ([], []), main_pid, duration, limit_bytes, series)


def assess_copy_on_read(rd: RunData, until_s: float | None = None) -> dict[str, Any] | None:
    """Copy-on-read's finding on the record (up to ``until_s``), None where it cannot be read."""
    try:
        return dict(cor_mod.assess(rd, until_s).to_dict())
    except Exception:  # a record being written can be read half-way; the kind then waits for the next refit
        return None


def _unzip(rows: Any) -> Series:
    ts: list[float] = []
    ys: list[float] = []
    for t, v in rows:
        ts.append(float(t))
        ys.append(float(v or 0))
    return ts, ys


def judge(
    inp: Inputs,
    ended: bool = False,
    spikes: Sequence[Spike] | None = None,
    copy_on_read: Mapping[str, Any] | None = None,
) -> Judgment:
    """The run's verdict over ``inp``: the tree's fit, its parts' (``leak.part_verdicts``), and its growth kind
    (``growth.judge``). An ended run is fitted without its teardown; where that leaves too little for a verdict
    that the run had while it went, the run's whole series decide (the card never says less than the live
    line said). ``spikes``: the excursions found by the caller (else found here on ``inp.total``)."""
    if copy_on_read is None:
        copy_on_read = inp.copy_on_read
    j = _judge(inp, ended, spikes, copy_on_read)
    if ended and j.verdict.verdict == "insufficient_data":
        live = _judge(inp, False, spikes, copy_on_read)
        if live.verdict.verdict != "insufficient_data":
            return live
    return j


def _judge(
    inp: Inputs, ended: bool, spikes: Sequence[Spike] | None, copy_on_read: Mapping[str, Any] | None
) -> Judgment:
    plan = fit_plan(inp.events, inp.duration, inp.main_pid, ended=ended)
    tree = plan.verdict(*inp.tree, inp.limit_bytes)
    parts = part_verdicts(plan, inp.own, inp.procs)
    span = plan.span(*inp.tree)[0]
    if spikes is None:
        spikes = find_spikes(*inp.total, phases=plan.phases) if len(inp.total[0]) >= 3 else []
    lo = span[0] if span else 0.0
    named = [s for s in spikes if s.end_s >= lo and _named_spike(s)]
    top = max((s.height_bytes for s in named), default=0)
    n = len(named)
    ev = Evidence(top, n, _counts(inp.counts, span), copy_on_read, inp.limit_bytes)
    steps, step_name = _steps(inp, span)

    def stairs_of(role: str | None) -> Stairs | None:
        if len(steps) < 2:
            return None
        s = _part_series(inp, role)
        return stairs(*plan.span(*s), steps, step_name) if s else None

    verdict, growth = judge_growth(tree, parts, ev, stairs_of)
    wait = None
    if growth is not None and growth.kind == "step":
        growth, wait = _held_step(plan.start_s, plan.span(*inp.tree), verdict, growth, ended)
    return Judgment(verdict, parts, growth, plan, list(spikes), wait)


def _held_step(start_s: float | None, s: Series, v: LeakVerdict, g: Growth, ended: bool) -> tuple[Growth, str | None]:
    """A step is a rise that then holds.

    A rise spread over more than RAMP_S is a warm-up that settled (imports, the model built), no step, unless the
    floor then held its new level at least as long as it took to rise: a cache that filled over the first 27 s of
    a Lightning training (+200 MiB), then held for 50 s, was "the floor is flat"; it is now "the floor rose 245
    MiB over 27 s, then held" (benchmarks/scenarios_heldout/lightning_cache_warms.py). No step either, where no
    training start is known (plain torch: no DataLoader epoch, no train()/eval() switch): a rise in the first
    STARTUP_SHARE of the run: a sawtooth's record read "stepped up 81 MiB once" for its 16 s of
    imports. While the floor has held its new level for less than STEP_HELD_S (live: and a third of the fit),
    it may be a staircase's first stair, a leak's start (a validation that keeps its outputs looked like "stepped
    up once" for 10 s) or a sawtooth's tooth: live, the words for what it waits for; at the end, no step."""
    t, y = s
    a, b = v.baseline_start_bytes, v.baseline_end_bytes
    if not t or a is None or b is None:
        return g, None
    at = _step_at(t, y, (a + b) / 2.0)
    calm = Growth("spikes", spike_bytes=g.spike_bytes) if g.spike_bytes else Growth("flat")
    ramp = _step_at(t, y, a + 0.9 * (b - a)) - _step_at(t, y, a + 0.1 * (b - a))
    if ramp > RAMP_S:
        # A gradual rise (a cache filling, a warm-up) that then held as long as it took: a rise said with
        # its length. Measured from the fit's first seconds: the first fifth's floor (``a``) is already partway up.
        first = sorted(val for x, val in zip(t, y) if x <= t[0] + RAMP_S / 2)
        lo = min(a, first[len(first) // 4]) if first else a
        done = _step_at(t, y, lo + 0.9 * (b - lo))
        ramp = (done - _step_at(t, y, lo + 0.1 * (b - lo))) / 0.8  # its 10 % to 90 %, as the whole of a line
        if t[-1] - done < max(STEP_HELD_S, RAMP_HELD * ramp):
            if not ended and t[-1] - done < STEP_HELD_S:
                # Still rising, or only just level: "the floor is flat" would be false (seen at 35 s of a run
                # keeping 1.6 MiB/s whose first 15 s reused freed heap), "no leak" not yet known.
                rose = (b - lo) / 2**20
                return g, f"the floor rose {rose:.0f} MiB over {ramp:.0f} s; a leak if it goes on, none if it holds"
            return calm, None
        g, at = replace(g, rise_bytes=int(b - lo), rise_s=ramp), done
    if start_s is None and at - t[0] < STARTUP_SHARE * (t[-1] - t[0]):
        return calm, None
    held = t[-1] - at
    need = STEP_HELD_S if ended else max(STEP_HELD_S, (t[-1] - t[0]) / 3.0)
    if held >= need:
        return g, None
    if ended:
        return calm, None
    return g, f"stepped up {(b - a) / 2**20:.0f} MiB {held:.0f} s ago; a step must hold {need:.0f} s to be no leak"


def _step_at(t: list[float], y: list[float], mid: float) -> float:
    """The earliest time from which the series stays above ``mid``."""
    at = t[-1]
    low = float("inf")
    for x, val in zip(reversed(t), reversed(y)):
        low = min(low, val)
        if low < mid:
            break
        at = x
    return at


def _named_spike(s: Spike) -> bool:
    """An excursion the kind names: a spike (up to PLATEAU_S), or a longer plateau during an evaluation. A plateau
    of 20 s in the training's own phase was, on clean runs (a Trainer, Lightning with persistent workers), the
    tree's sum moving while processes came and went, no memory the training held for a moment."""
    if s.end_s - s.start_s <= PLATEAU_S:
        return True
    return s.phase is not None and any(w in s.phase.lower() for w in _EVAL_WORDS)


def _counts(counts: Series, span: list[float]) -> tuple[int, int] | None:
    """The most processes alive at once in the first fifth of the fitted stretch, and in its last fifth."""
    t, n = counts
    if len(span) < 2 or not t:
        return None
    a, b = span[0], span[-1]
    edge = (b - a) / 5.0
    first = [int(c) for x, c in zip(t, n) if a <= x <= a + edge]
    last = [int(c) for x, c in zip(t, n) if b - edge <= x <= b]
    return (max(first), max(last)) if first and last else None


def _steps(inp: Inputs, span: list[float]) -> tuple[list[tuple[float, float]], str]:
    """Where a staircase would step inside the fitted stretch: each evaluation (an automatic "eval" phase of the
    main, or a phase the user named for validation), else each DataLoader epoch's start."""
    if len(span) < 2:
        return [], "evaluation"
    a, b = span[0], span[-1]
    phases = phases_mod.intervals([e for e in inp.events if e.get("kind", "phase") == "phase"], b, inp.main_pid)
    evals = [(s, e) for name, s, e in phases if a < s and e < b and any(w in name.lower() for w in _EVAL_WORDS)]
    if evals:
        return _merged(evals), "evaluation"
    epochs = [
        float(e["t"])
        for e in inp.events
        if e.get("kind") == "epoch" and (inp.main_pid is None or e.get("pid") == inp.main_pid) and a < e["t"] < b
    ]
    return [(x, x) for x in sorted(set(epochs))], "epoch"


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping intervals as one (an automatic eval phase and the user's "validation" around it)."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _part_series(inp: Inputs, role: str | None) -> Series | None:
    """The series a part's staircase is read on: the tree's (None), the main's own, else the process of ``role``
    whose floor rose most."""
    if role is None:
        return inp.tree
    if role == "main":
        return inp.own
    best = None
    for r, t, y in inp.procs.values():
        if r == role and len(y) >= 3 and (best is None or y[-1] - y[0] > best[1][-1] - best[1][0]):
            best = (t, y)
    return best
