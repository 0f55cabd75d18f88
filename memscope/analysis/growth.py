"""What the memory is doing, as one of ``model.GROWTH_KINDS``: the run's verdict made from its tree's fit and its
parts' (the main's own memory, each process of a role), so that a leaking part is never hidden by a tree fit that
missed it, and the kind said in words a person acts on.

Pure functions; standard library only. The kinds:

- ``leak``: some process's own memory grows, sustained (linear, or a staircase stepping at each evaluation or
  epoch); the run's verdict is ``leak`` whenever one part leaks materially and with confidence.
- ``copy_on_read``: DataLoader workers' private memory rises toward the pages they share with their parent while
  their RSS stays flat (``analysis/copy_on_read.py`` detects it): bounded, no leak.
- ``more_processes``: the floor rose only because more processes were alive at its end than at its start.
- ``step``: the floor rose once and held; ``spikes``: excursions over a flat floor; ``flat``: neither.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from ..model import GrowthInfo
from .copy_on_read import MIN_WORKER_BYTES as MIN_COPY_BYTES
from .leak import MIN_GROWTH_BYTES, SLOW_BYTES_PER_S, LeakVerdict, floor_step

PART_SHARE = 0.01  # a leaking part overrules the tree when it grew by more than this share of the tree's floor
SLOW_LEAK_BYTES_PER_S = 2 * SLOW_BYTES_PER_S  # the headline says "Slow leak" below this (seed 004's 1 MiB/s is one)
SPIKE_SHARE = 0.10  # an excursion is a spike worth naming above this share of the floor
STEP_SHARE = 0.05  # a step worth naming raised the floor by this share (a clean run's warm-up settles a few %)
STEP_OWN_SHARE = 0.5  # a step is some process's own: its own floor rose by at least this share of the tree's step
STAIR_SHARE = 0.75  # a leak is a staircase when its rises across the evaluations make this share of its growth

ROLE_WORDS = {
    "main": "the main process",
    "dataloader_worker": "the DataLoader workers",
    "compile_worker": "torch.compile's workers",
    "rank": "a rank",
    "wrapper": "the wrapper",
    "helper": "a helper process",
    "other": "a child process",
}


def _mib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 1000 * 2**20 else f"{n / 2**20:.0f} MiB"  # never "1024 MiB"


@dataclass(frozen=True)
class Stairs:
    """A leak that steps at each evaluation (or epoch): how many steps, and what each kept on average."""

    step_name: str  # "evaluation" | "epoch"
    steps: int
    per_step_bytes: int


@dataclass(frozen=True)
class Evidence:
    """What the kind is told from besides the fits: the highest excursion above the floor and how many there were,
    the processes alive at the floor's start and at its end, and copy-on-read's section where it was detected."""

    spike_bytes: int = 0
    spikes: int = 0
    processes: tuple[int, int] | None = None
    copy_on_read: Mapping[str, Any] | None = None
    limit_bytes: int | None = None


@dataclass(frozen=True)
class Growth:
    """The kind of growth and the figures its words need."""

    kind: str
    where: tuple[str, ...] = ()  # the leaking parts (roles), main first
    rate_bytes_per_s: float | None = None
    rise_bytes: int | None = None  # step / more_processes: how much the floor rose
    rise_s: float | None = None  # step: over how long, where it rose gradually (a cache filling, a warm-up)
    stairs: Stairs | None = None
    spike_bytes: int | None = None
    processes: tuple[int, int] | None = None
    bound_bytes: int | None = None  # copy_on_read: where the tree levels off
    workers: int | None = None  # copy_on_read: the workers that copy ...
    each_bytes: int | None = None  # ... what each copied so far (on average)
    attribute: str | None = None  # ... and the Dataset attribute they read, where the workers named it

    def words(self, fmt: Callable[[int], str] = _mib) -> str:
        """The kind in one line a person acts on without the docs."""
        return _WORDS[self.kind](self, fmt)

    def to_dict(self) -> GrowthInfo:
        """The summary's ``leak.growth``."""
        d: GrowthInfo = {"kind": self.kind, "words": self.words(), "where": list(self.where)}
        if self.rate_bytes_per_s is not None:
            d["rate_bytes_per_s"] = float(self.rate_bytes_per_s)
        if self.rise_bytes is not None:
            d["rise_bytes"] = int(self.rise_bytes)
        if self.rise_s is not None:
            d["rise_s"] = round(float(self.rise_s), 1)
        if self.stairs is not None:
            d["step_name"], d["steps"] = self.stairs.step_name, self.stairs.steps
            d["per_step_bytes"] = self.stairs.per_step_bytes
        if self.spike_bytes:
            d["spike_bytes"] = int(self.spike_bytes)
        if self.processes is not None:
            d["processes_before"], d["processes_after"] = self.processes
        if self.bound_bytes is not None:
            d["bound_bytes"] = int(self.bound_bytes)
        if self.workers:
            d["workers"], d["each_bytes"] = self.workers, int(self.each_bytes or 0)
        if self.attribute:
            d["attribute"] = self.attribute
        return d


def rate_words(slope: float, fmt: Callable[[int], str] = _mib) -> str:
    """A leak's pace in the units that fit: "+1 MiB/s (+60 MiB/min)", "+3 MiB/min", "+17 MiB/h"."""
    if slope >= SLOW_BYTES_PER_S / 2:
        per_s = f"{slope / 2**20:.1f} MiB" if slope < 10 * 2**20 else fmt(int(slope))
        return f"+{per_s}/s (+{fmt(int(slope * 60))}/min)"
    if slope * 60 >= 2**20:
        return f"+{fmt(int(slope * 60))}/min"
    if slope * 3600 >= 2**20:
        return f"+{fmt(int(slope * 3600))}/h"
    return f"+{slope * 3600 / 1024:.0f} KiB/h"


def _average(slope: float, fmt: Callable[[int], str]) -> str:
    """A staircase's pace over time, in the unit that does not round it to 0: "+495 MiB/min", "+17 MiB/h"."""
    return f"+{fmt(int(slope * 60))}/min" if slope * 60 >= 2**20 else f"+{fmt(int(slope * 3600))}/h"


def _where_words(where: Sequence[str]) -> str:
    return " and ".join(ROLE_WORDS.get(r, r) for r in where) if where else "the process tree"


def _leak_words(g: Growth, fmt: Callable[[int], str]) -> str:
    slope = g.rate_bytes_per_s or 0.0
    pace = "Slow leak" if slope < SLOW_LEAK_BYTES_PER_S else "Leak"
    head = f"{pace} in {_where_words(g.where)}: "
    if g.stairs is not None:
        s = g.stairs
        head += (
            f"+{fmt(s.per_step_bytes)} per {s.step_name}, {s.steps} {s.step_name}s ({_average(slope, fmt)} on average)"
        )
    else:
        head += rate_words(slope, fmt)
    if g.spike_bytes:
        head += f" under spikes of ~{fmt(g.spike_bytes)}"
    return head


def _cor_words(g: Growth, fmt: Callable[[int], str]) -> str:
    who = f"{g.workers} DataLoader workers" if g.workers and g.workers > 1 else "DataLoader workers"
    each = f" +{fmt(g.each_bytes)} each" if g.workers and g.each_bytes else ""
    read = f" reading `{g.attribute}`" if g.attribute else ""
    bound = f"bounded at about {fmt(g.bound_bytes)} for the tree" if g.bound_bytes else "bounded"
    return (
        f"{who} copying their parent's pages (copy-on-read){',' if each or read else ''}{each}{read}: {bound}, no leak"
    )


def _more_words(g: Growth, fmt: Callable[[int], str]) -> str:
    by = f" {fmt(g.rise_bytes)}" if g.rise_bytes and g.rise_bytes >= 2**20 else ""
    n = f" ({g.processes[0]} -> {g.processes[1]} processes)" if g.processes else ""
    return f"No leak: the floor rose{by} only because more processes were alive{n}; each one's own memory is flat"


def _step_words(g: Growth, fmt: Callable[[int], str]) -> str:
    spikes = f"; spikes up to {fmt(g.spike_bytes)} above it" if g.spike_bytes else ""
    if g.rise_s:
        return f"No leak: the floor rose {fmt(g.rise_bytes or 0)} over {g.rise_s:.0f} s, then held{spikes}"
    return f"No leak: stepped up once by {fmt(g.rise_bytes or 0)}, then held{spikes}"


def _spikes_words(g: Growth, fmt: Callable[[int], str]) -> str:
    return f"Only spikes: the floor is flat; spikes up to {fmt(g.spike_bytes or 0)} above it"


_WORDS: dict[str, Callable[[Growth, Callable[[int], str]], str]] = {
    "leak": _leak_words,
    "copy_on_read": _cor_words,
    "more_processes": _more_words,
    "step": _step_words,
    "spikes": _spikes_words,
    "flat": lambda g, fmt: "No leak: the floor is flat",
}


def _material_spike(spike_bytes: int, floor: int | None) -> bool:
    """A spike worth naming: above SPIKE_SHARE of the floor (a clean run's batches wobble a few percent)."""
    return spike_bytes > max(MIN_GROWTH_BYTES, SPIKE_SHARE * abs(floor or 0))


def leaking_parts(tree: LeakVerdict, parts: Mapping[str, LeakVerdict], ev: Evidence) -> list[str]:
    """The parts that leak materially and with confidence, main first then by pace. Material: each part's own
    verdict's rule, and its growth over the fit more than PART_SHARE of the tree's floor (a worker's 6 MiB in a
    10 GiB tree is no run's leak). DataLoader workers copying their parent's pages (copy-on-read) do not leak."""
    floor = tree.baseline_end_bytes or 0
    out = []
    for role, v in parts.items():
        if v.verdict != "leak" or (role == "dataloader_worker" and _cor(ev)):
            continue
        a, b = v.baseline_start_bytes, v.baseline_end_bytes
        grew = (b - a) if a is not None and b is not None else 0
        if grew > max(MIN_GROWTH_BYTES, PART_SHARE * floor):
            out.append(role)
    return sorted(out, key=lambda r: (r != "main", -(parts[r].slope_bytes_per_s or 0.0)))


def _cor(ev: Evidence) -> bool:
    return bool(ev.copy_on_read and ev.copy_on_read.get("detected"))


def _rose(ev: Evidence) -> bool:
    return ev.processes is not None and ev.processes[1] > ev.processes[0]


def judge(
    tree: LeakVerdict,
    parts: Mapping[str, LeakVerdict],
    ev: Evidence,
    stairs_of: Callable[[str | None], Stairs | None] = lambda _: None,
) -> tuple[LeakVerdict, Growth | None]:
    """The run's verdict and its kind of growth, from the tree's verdict and its parts' (``leak.part_verdicts``).

    A part that leaks makes the run's verdict ``leak`` (where the tree's fit missed it: its slope is the part's);
    copy-on-read and more processes alive explain a tree that rose while no part leaks; else the tree's floor says
    step, spikes or flat. None for the kind while the verdict is ``insufficient_data``. ``stairs_of(role)``: the
    leaking part's staircase where it has one (None: the tree's)."""
    spike = ev.spike_bytes if _material_spike(ev.spike_bytes, tree.baseline_end_bytes) else 0
    leaking = leaking_parts(tree, parts, ev)
    if leaking:
        return _part_leak(tree, parts, leaking, ev, spike, stairs_of)
    if _cor(ev) and tree.verdict != "insufficient_data":
        v = replace(tree, verdict="no_leak", time_to_limit_s=None)
        return v, _cor_growth(ev.copy_on_read or {})
    if tree.verdict == "leak":
        flat = all(v.verdict == "no_leak" for v in parts.values())
        # A part too young for a verdict of its own (workers that came with the rise) leaks nothing proven: where
        # the count of processes alive rose and no part leaks, the tree rose with more processes.
        unproven = all(v.verdict != "leak" for v in parts.values()) and _rose(ev)
        if len(parts) >= 2 and "main" in parts and parts["main"].verdict == "no_leak" and (flat or unproven):
            return _overruled(tree, ev, spike, _own_rise(parts))
        g = Growth("leak", (), tree.slope_bytes_per_s, stairs=stairs_of(None), spike_bytes=spike or None)
        return tree, g
    if tree.verdict == "insufficient_data":
        main = parts.get("main")
        if (
            len(parts) < 2
            or main is None
            or main.verdict != "no_leak"
            or any(v.verdict != "no_leak" for v in parts.values())
        ):
            return tree, None
        tree = replace(main, time_to_limit_s=None, parts="parts")
    return tree, _floor_kind(tree, ev, spike, _own_rise(parts))


def _own_rise(parts: Mapping[str, LeakVerdict]) -> int | None:
    """The most any part's own floor rose (None: no parts, a run of one process is its tree)."""
    rises = [
        v.baseline_end_bytes - v.baseline_start_bytes
        for v in parts.values()
        if v.baseline_end_bytes is not None and v.baseline_start_bytes is not None
    ]
    return max(rises) if rises else None


def _cor_growth(cor: Mapping[str, Any]) -> Growth:
    """Copy-on-read's kind, with what its section says: the workers that copy, what each copied, the attribute
    they read (analysis/copy_on_read.py's ``to_dict``)."""
    bound = cor.get("bound_bytes")
    rows = [w for w in cor.get("workers") or () if isinstance(w, dict) and w.get("flat", True) is not False]
    copied = [int(w.get("copied_bytes") or 0) for w in rows if (w.get("copied_bytes") or 0) >= MIN_COPY_BYTES]
    attr = cor.get("attribute")
    name = attr.get("name") if isinstance(attr, dict) else None
    return Growth(
        "copy_on_read",
        ("dataloader_worker",),
        bound_bytes=bound if isinstance(bound, int) else None,
        workers=len(copied) or None,
        each_bytes=int(sum(copied) / len(copied)) if copied else None,
        attribute=str(name) if name else None,
    )


def _part_leak(
    tree: LeakVerdict,
    parts: Mapping[str, LeakVerdict],
    leaking: list[str],
    ev: Evidence,
    spike: int,
    stairs_of: Callable[[str | None], Stairs | None],
) -> tuple[LeakVerdict, Growth]:
    lead = parts[leaking[0]]
    if tree.verdict == "leak":
        v = tree
    else:  # the tree's fit missed it: the part's pace, the tree's levels where it has them
        slope = lead.slope_bytes_per_s or 0.0
        end = tree.baseline_end_bytes if tree.baseline_end_bytes is not None else lead.baseline_end_bytes
        ttl = None
        if ev.limit_bytes is not None and end is not None and slope > 0:
            ttl = max(0.0, (ev.limit_bytes - end) / slope)
        v = replace(
            lead,
            baseline_start_bytes=tree.baseline_start_bytes
            if tree.baseline_start_bytes is not None
            else lead.baseline_start_bytes,
            baseline_end_bytes=end,
            time_to_limit_s=ttl,
            parts=None,
        )
    rate = lead.slope_bytes_per_s if tree.verdict != "leak" else v.slope_bytes_per_s
    return v, Growth("leak", tuple(leaking), rate, stairs=stairs_of(leaking[0]), spike_bytes=spike or None)


def _overruled(tree: LeakVerdict, ev: Evidence, spike: int, own_rise: int | None) -> tuple[LeakVerdict, Growth]:
    """The tree's floor rose while each part's own stayed flat: more processes alive, where their count really
    rose; else a rise that held (the tree's sum moved as processes' shares of their pages did)."""
    v = replace(tree, verdict="no_leak", time_to_limit_s=None, parts="processes" if _rose(ev) else None)
    return v, _floor_kind(v, ev, spike, own_rise, rose_anyway=True)


def _floor_kind(v: LeakVerdict, ev: Evidence, spike: int, own_rise: int | None, rose_anyway: bool = False) -> Growth:
    """A floor that did not leak: more processes (their count rose with it), a step (some process's own floor rose
    with it: the tree's sum also moves as processes' shares of their pages do, and that is no step), spikes, flat."""
    a, b = v.baseline_start_bytes, v.baseline_end_bytes
    rise = (b - a) if a is not None and b is not None else 0
    step = floor_step(dict(v.to_dict(), parts=None)) if not rose_anyway else (rise if rise > 0 else None)
    if step and _rose(ev):
        return Growth("more_processes", rise_bytes=step, processes=ev.processes, spike_bytes=spike or None)
    own = own_rise is None or (step is not None and own_rise >= STEP_OWN_SHARE * step)
    if step and own and step >= max(MIN_GROWTH_BYTES, STEP_SHARE * abs(b or 0)):
        return Growth("step", rise_bytes=step, spike_bytes=spike or None)
    if spike:
        return Growth("spikes", spike_bytes=spike)
    return Growth("flat")


def stairs(
    t: Sequence[float],
    y: Sequence[float],
    steps: Sequence[tuple[float, float]],
    step_name: str,
) -> Stairs | None:
    """A staircase of ``(t, y)`` (a floor series) at ``steps`` (``(start, end)`` of each evaluation, or an epoch's
    boundary as ``(t, t)``): the floor's rise across each step (its level just before, and just after) against its
    rise inside the stretches between them. A staircase when two steps or more rise and the rises across the steps
    make STAIR_SHARE of the growth; else None (a linear leak grows between the evaluations as much as across)."""
    across, within = [], 0.0
    for k, (a, b) in enumerate(steps):
        nxt = steps[k + 1][0] if k + 1 < len(steps) else (t[-1] if t else b)
        prev = steps[k - 1][1] if k else (t[0] if t else a)
        w = max(0.5, min(5.0, (a - prev) / 4, (nxt - b) / 4))
        before, after = _level(t, y, a - w, a), _level(t, y, b, b + w)
        if before is not None and after is not None:
            across.append(after - before)
        end = _level(t, y, nxt - w, nxt) if k + 1 < len(steps) else None
        if after is not None and end is not None:
            within += max(0.0, end - after)
    total = sum(across)
    if len(across) < 2 or total <= 0 or sum(r > MIN_GROWTH_BYTES / 5 for r in across) < 2:
        return None
    if total < STAIR_SHARE * (total + within):
        return None
    return Stairs(step_name, len(across), int(total / len(across)))


def _level(t: Sequence[float], y: Sequence[float], a: float, b: float) -> float | None:
    """The lower quartile of the samples in [a, b] (a floor's level there, past a spike), None with fewer than 2."""
    pts = sorted(y[bisect_left(t, a) : bisect_right(t, b)])
    return pts[len(pts) // 4] if len(pts) >= 2 else None
