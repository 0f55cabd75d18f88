"""Phases of a run as intervals, and memory per phase: pure functions over recorded events and a series.

Automatic phases ("train"/"eval" from top-level nn.Module switches) follow each other: a switch ends the previous
one. Manual phases (memscope.phase) are start/end pairs and may nest inside automatic ones.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterable, Sequence


def intervals(events: Iterable[dict[str, Any]], end_s: float, pid: int | None = None) -> list[tuple[str, float, float]]:
    """(name, start_s, end_s) from "phase" events ({"t", "pid", "data": {"name", "state"}}), in start order.

    ``pid``: only that process's events (the main's; workers do not define the run's phases)."""
    out: list[tuple[str, float, float]] = []
    auto: tuple[str, float] | None = None
    open_: dict[str, list[float]] = {}
    for e in events:
        if pid is not None and e.get("pid") not in (pid, None):
            continue
        d, t = e["data"], float(e["t"])
        name, state = str(d.get("name", "?")), d.get("state")
        if state in ("switch", "stop"):
            if auto is not None and t > auto[1]:
                out.append((auto[0], auto[1], t))
            auto = (name, t) if state == "switch" else None  # "stop": the phase ended, the next is unknown
        elif state == "start":
            open_.setdefault(name, []).append(t)
        elif state == "end" and open_.get(name):
            out.append((name, open_[name].pop(), t))
    if auto is not None and end_s > auto[1]:
        out.append((auto[0], auto[1], end_s))
    for name, starts in open_.items():
        out.extend((name, s, end_s) for s in starts if end_s > s)
    return sorted(out, key=lambda x: (x[1], x[2]))


def stats(phases: Sequence[tuple[str, float, float]], t: Sequence[float], y: Sequence[float]) -> list[dict[str, Any]]:
    """The summary's ``phases`` list: name, start, end, and the peak and mean of ``y`` inside each."""
    out = []
    for name, a, b in phases:
        i, j = bisect_left(t, a), bisect_right(t, b)
        window = list(y[i:j])
        if not window and len(t):
            # A phase shorter than the sampling period: the sample nearest to it is what memory held then.
            k = min((k for k in (i - 1, i) if 0 <= k < len(t)), key=lambda k: abs(t[k] - (a + b) / 2))
            window = [y[k]]
        out.append(
            {
                "name": name,
                "start_s": round(a, 3),
                "end_s": round(b, 3),
                "peak_bytes": int(max(window)) if window else None,
                "mean_bytes": int(sum(window) / len(window)) if window else None,
            }
        )
    return out


def automatic_only(phases: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """The non-overlapping train/eval phases: what the leak baseline is split by."""
    return [p for p in phases if p[0] in ("train", "eval")]


def training_start(events: Iterable[dict[str, Any]], pid: int | None = None) -> float | None:
    """When the training began: the first DataLoader epoch or automatic train/eval switch (of ``pid``, the main
    process, when given); None if the run announced none."""
    ts = [
        float(e["t"])
        for e in events
        if e.get("kind") in ("epoch", "phase")
        and (e.get("kind") == "epoch" or (e.get("data") or {}).get("auto"))
        and (pid is None or e.get("pid") == pid)
    ]
    return min(ts) if ts else None
