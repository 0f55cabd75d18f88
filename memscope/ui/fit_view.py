"""The notebook view of ``memscope fit``: the probes, the fitted line, the limit and the target, drawn live.

``FitView(fit)`` subscribes to a ``session.fit.Fit`` (its probes run on a thread of their own, so the kernel stays
free) and redraws as each probe's peak grows and as each probe finishes: a Bokeh chart (``FitChart``, an anywidget
with BokehJS from the installed wheel, carried by the dashboard's loader) and a line of words under it.
``chart_data`` is the chart's whole state, a pure function of what the fit knows so far.
"""

from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import anywidget
import ipywidgets as w
import traitlets
from ipywidgets import widget_serialization

from ..analysis import fit as model
from ..fmt import fmt_bytes
from .chart import BokehJS, bokeh_version, bokehjs_loader

_ESM = (Path(__file__).with_name("fit_view.js")).read_text(encoding="utf-8")
PUSH_S = 0.5  # the running probe's peak is redrawn at most this often


class FitChart(anywidget.AnyWidget):
    """The chart: ``data`` is ``chart_data(...)`` (a few points, synced whole)."""

    _esm = _ESM
    data = traitlets.Dict().tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    height = traitlets.Int(300).tag(sync=True)
    _bokeh_version = traitlets.Unicode("").tag(sync=True)
    _bokehjs = traitlets.Instance(BokehJS, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(_bokeh_version=bokeh_version(), _bokehjs=bokehjs_loader(), **kwargs)


def chart_data(
    points: Sequence[model.Point],
    target: int,
    limit: int | None,
    margin: float,
    live: tuple[int, int] | None = None,
    result: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What the chart draws: the probes (size, peak, died, anchor), the probe running (size, peak so far), the line
    (fitted on the fixed-threshold probes so far, drawn from 0 to past the target), the anchor (the probe with the
    program's own allocator settings) and its line to the forecast, the limit, the budget, the target, the
    forecast."""
    line, offset = model.host_line(points)
    kept = model.retention(points)
    sizes = [p.size for p in points] + [target] + ([live[0]] if live else [])
    xmax = max(sizes) * 1.1
    out: dict[str, Any] = {
        "probes": [
            {"size": p.size, "peak": p.peaks.get(model.HOST_SERIES), "died": p.died, "anchor": p.anchor}
            for p in sorted(points, key=lambda p: (p.size, p.anchor))
        ],
        "live": {"size": live[0], "peak": live[1]} if live else None,
        "target": target,
        "xmax": xmax,
        "limit": limit,
        "budget": limit * (1 - margin) if limit else None,
        "line": None,
        "anchor_line": None,
        "forecast": None,
    }
    if line is not None:
        xs = [0.0, *sorted({float(s) for s in line.sizes}), float(target), xmax]
        xs = sorted(set(xs))
        out["line"] = {"x": xs, "y": [max(0.0, model.predict(line, x)[0] + offset) for x in xs]}
        out["forecast"] = round(max(0.0, model.predict(line, target)[0] + offset + (kept or 0.0)))
        a = model.anchor(points)
        if kept is not None and a is not None and a.peaks.get(model.HOST_SERIES) is not None:
            # from the anchor's peak (what the chart shows) to the forecast: the line's slope plus the retention
            out["anchor_line"] = {"x": [a.size, target], "y": [a.peaks[model.HOST_SERIES], out["forecast"]]}
    if result is not None and result.get("predicted_peak_bytes") is not None:
        out["forecast"] = result["predicted_peak_bytes"]
        if out["anchor_line"] is not None:
            out["anchor_line"]["y"][1] = out["forecast"]
    return out


def words(
    points: Sequence[model.Point],
    live: tuple[int, int] | None,
    result: Mapping[str, Any] | None,
    error: str | None,
    target: int,
) -> str:
    """The line under the chart, as HTML (every figure is memscope's; a record path is escaped)."""
    if error:
        return f"<b>memscope fit stopped:</b> {html.escape(error)}"
    if result is not None:
        pred = result.get("predicted_peak_bytes")
        verdict = "fits" if result.get("fits") else "does <b>not</b> fit"
        text = f"Size {target} {verdict}: forecast {fmt_bytes(pred)} peak"
        if result.get("limit_bytes"):
            budget = result["limit_bytes"] * (1 - result["margin"])
            text += f" against {fmt_bytes(budget)} ({fmt_bytes(result['limit_bytes'])} less {result['margin']:.0%})"
        kept = (result.get("allocator") or {}).get("retention_bytes")
        if kept is not None:
            text += (
                f" (the line of the probes with a fixed mmap threshold, plus {fmt_bytes(kept)} the program's own "
                f"allocator kept at size {result['allocator']['anchor_size']})"
            )
        high = model.high_words(result)
        if high:
            text += f", {high}"
        if result.get("largest_fitting_size") is not None:
            text += f"; the largest size that fits: {result['largest_fitting_size']}"
        notes = "".join(f"<br>{html.escape(n)}" for n in result.get("notes") or [])
        return text + "." + notes
    done = ", ".join(
        f"{p.size}{' (own allocator)' if p.anchor else ''}: "
        f"{'did not fit' if p.died else fmt_bytes(p.peaks.get(model.HOST_SERIES))}"
        for p in points
        if p.died != "skipped"
    )
    now = f"probing size {live[0]} (peak so far {fmt_bytes(live[1])})" if live else "starting"
    return f"memscope fit: {now}" + (f"; done {done}" if done else "")


class FitView:
    """A fit's live view in a notebook cell (``display(view)`` or as a cell's last value)."""

    def __init__(self, fit: Any, title: str = "") -> None:
        self.fit = fit
        self._lock = threading.Lock()
        self._live: tuple[int, int] | None = None
        self._last_push = 0.0
        self.chart = FitChart(title=title or "will it fit?")
        self.status = w.HTML()
        self.box = w.VBox([self.chart, self.status])
        self.refresh()
        self._unsubscribe = fit.subscribe(self._on)
        if fit.done:
            self.refresh()

    def _on(self, kind: str, data: Mapping[str, Any]) -> None:
        if kind == "sample":
            with self._lock:
                peak = max(self._live[1] if self._live and self._live[0] == data["size"] else 0, data["bytes"] or 0)
                self._live = (data["size"], peak)
            now = time.monotonic()
            if now - self._last_push < PUSH_S:
                return
            self._last_push = now
        elif kind in ("probe_done", "result", "done"):
            with self._lock:
                self._live = None
        elif kind == "probe_started":
            with self._lock:
                self._live = (data["size"], 0)
        self.refresh()

    def refresh(self) -> None:
        """Redraw from what the fit knows now."""
        f = self.fit
        with self._lock:
            live = self._live
        points = list(f.points)
        limit = f.limit_bytes or (f.result or {}).get("limit_bytes") or _least(p.limit_bytes for p in points)
        self.chart.data = chart_data(points, f.target, limit, f.margin, live, f.result)
        self.status.value = words(points, live, f.result, f.error, f.target)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def _least(values: Any) -> int | None:
    vals = [int(v) for v in values if v]
    return min(vals) if vals else None
