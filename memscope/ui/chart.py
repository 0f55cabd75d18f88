"""The live memory chart for notebooks: an anywidget that draws with BokehJS.

``MemoryChart(data)`` shows a ``RunSeries.snapshot()``: the tree's PSS stacked by role, the main process's RSS,
the summed RSS of the tree, the host's available memory and the limit (dashed), and phase bands. Assigning
``chart.data`` (or calling ``chart.update(snapshot)``) updates the plot's data sources in place. The widget's state
holds the whole (already decimated) window, so a reloaded page or a second view shows the full history.

BokehJS comes from the installed ``bokeh`` wheel (``bokeh.min.js`` + ``bokeh-api.min.js``), inline: no CDN, no
server, no IFrame. Its text travels once per kernel, in the state of a single hidden ``_BokehJS`` widget that every
chart references; the browser injects it at most once per window (``chart.js``). Works with anywidget >= 0.9 and
ipywidgets 7.7 or 8.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Mapping

import anywidget
import traitlets
from ipywidgets import widget_serialization

__all__ = ["MemoryChart", "chart_payload", "count_points", "bokehjs_source", "bokehjs_loader"]

_ESM = (Path(__file__).with_name("chart.js")).read_text(encoding="utf-8")

_SERIES_KEYS = ("main_rss", "host_available", "limit", "tree_rss")
_SCALAR_KEYS = ("version", "t_last", "ended")


def bokeh_version() -> str:
    """The installed bokeh's version (the chart's BokehJS must match it)."""
    import bokeh

    return bokeh.__version__


def _bokehjs_dir() -> Path:
    try:
        from bokeh.util.paths import bokehjs_path  # bokeh >= 3.1

        return Path(bokehjs_path()) / "js"
    except ImportError:  # pragma: no cover - older bokeh
        from importlib.resources import files

        return Path(str(files("bokeh"))) / "server" / "static" / "js"


_SOURCE_LOCK = threading.Lock()
_SOURCE: dict[str, str] | None = None


def bokehjs_source() -> dict[str, str]:
    """``{"version", "core", "api"}``: BokehJS's minified bundle and its plotting-API plugin, from the wheel."""
    global _SOURCE
    with _SOURCE_LOCK:
        if _SOURCE is None:
            d = _bokehjs_dir()
            core = (d / "bokeh.min.js").read_text(encoding="utf-8")
            api = (d / "bokeh-api.min.js").read_text(encoding="utf-8")
            _SOURCE = {"version": bokeh_version(), "core": core, "api": api}
        return _SOURCE


class _BokehJS(anywidget.AnyWidget):
    """Carries BokehJS to the browser once per kernel. Never displayed; charts reference it."""

    _esm = _ESM
    _bokeh_version = traitlets.Unicode("").tag(sync=True)
    core = traitlets.Unicode("").tag(sync=True)
    api = traitlets.Unicode("").tag(sync=True)


_LOADER_LOCK = threading.Lock()
_LOADER: _BokehJS | None = None


def bokehjs_loader() -> _BokehJS:
    """The kernel's single BokehJS carrier (created on first use, again if it was closed)."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None or getattr(_LOADER, "comm", None) is None:
            src = bokehjs_source()
            _LOADER = _BokehJS(_bokeh_version=src["version"], core=src["core"], api=src["api"])
        return _LOADER


def _series(d: Any) -> dict[str, list]:
    if not isinstance(d, Mapping):
        return {"t": [], "y": []}
    t, y = list(d.get("t") or []), list(d.get("y") or [])
    n = min(len(t), len(y))
    return {"t": t[:n], "y": y[:n]}


def _phases(phases: Any) -> list[dict[str, Any]]:
    out = []
    for p in phases or []:
        if isinstance(p, Mapping):
            name, start, end = p.get("name"), p.get("start_s"), p.get("end_s")
        elif isinstance(p, (list, tuple)) and len(p) >= 2:
            name, start, end = p[0], p[1], (p[2] if len(p) > 2 else None)
        else:
            continue
        if start is None:
            continue
        out.append({"name": str(name), "start_s": float(start), "end_s": None if end is None else float(end)})
    return out


def chart_payload(snapshot: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the chart draws from a ``RunSeries.snapshot()``: the series, phases and version, nothing else.

    Drops what the chart does not draw (``events`` can be hundreds of kB); accepts missing or empty keys and
    phases as dicts or ``(name, start_s, end_s)`` tuples. Idempotent."""
    snap = snapshot or {}
    out: dict[str, Any] = {}
    by_role = snap.get("tree_pss_by_role") or {}
    if isinstance(by_role, Mapping):
        out["tree_pss_by_role"] = {str(r): _series(s) for r, s in by_role.items()}
    for k in _SERIES_KEYS:
        if k in snap:
            out[k] = _series(snap[k])
    if snap.get("phases"):
        out["phases"] = _phases(snap["phases"])
    if snap.get("marks"):  # vertical marks: where stacks were taken
        out["marks"] = [
            {"t_s": float(m["t_s"]), "text": str(m.get("text", ""))[:60]}
            for m in snap["marks"]
            if isinstance(m, Mapping) and isinstance(m.get("t_s"), (int, float))
        ][-50:]
    for k in _SCALAR_KEYS:
        if k in snap:
            out[k] = snap[k]
    if isinstance(snap.get("labels"), Mapping):  # legend names of the lines (the GPU chart renames them)
        out["labels"] = {str(k): str(v) for k, v in snap["labels"].items()}
    return out


def count_points(data: Mapping[str, Any] | None) -> int:
    """The number of points in ``data``'s series: what ``rendered_points`` reads once the browser has drawn it
    (when the roles share their times, as ``RunSeries`` gives them)."""
    d = chart_payload(data)
    roles = [s for s in d.get("tree_pss_by_role", {}).values() if s["t"]]
    n = sum(len(s["t"]) for s in roles)
    return n + sum(len(d[k]["t"]) for k in _SERIES_KEYS if k in d)


class MemoryChart(anywidget.AnyWidget):
    """A live memory chart. ``MemoryChart(series.snapshot(), title="train.py")``; then ``chart.update(snap)``.

    Traits synced with the browser: ``data`` (a snapshot, normalised by :func:`chart_payload`), ``title``,
    ``height`` (pixels), ``window_s`` (what the x axis shows while it follows the run: 0 the whole run, else its
    last ``window_s`` seconds; the chart's "show" menu sets it), and ``rendered_points`` (set by the browser: the points it draws, see
    :func:`count_points`; 0 until a view has rendered)."""

    _esm = _ESM
    data = traitlets.Dict().tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    height = traitlets.Int(320).tag(sync=True)
    rendered_points = traitlets.Int(0).tag(sync=True)
    window_s = traitlets.Int(0).tag(sync=True)
    _bokeh_version = traitlets.Unicode("").tag(sync=True)
    _bokehjs = traitlets.Instance(_BokehJS, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(
        self, data: Mapping[str, Any] | None = None, *, title: str = "", height: int = 320, **kwargs: Any
    ) -> None:
        super().__init__(
            data=dict(data or {}),
            title=title,
            height=height,
            _bokeh_version=bokeh_version(),
            _bokehjs=bokehjs_loader(),
            **kwargs,
        )
        self.on_msg(self._on_custom_msg)

    @traitlets.validate("data")
    def _valid_data(self, proposal: Any) -> dict[str, Any]:
        return chart_payload(proposal["value"])

    def update(self, snapshot: Mapping[str, Any]) -> None:
        """Show a new snapshot (same as assigning ``data``)."""
        self.data = snapshot  # type: ignore[assignment]

    def _on_custom_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # A host that exposes no widget manager to the module and never instantiated the loader asks for BokehJS.
        if isinstance(content, Mapping) and content.get("type") == "memscope-bokehjs?":
            src = bokehjs_source()
            self.send({"type": "memscope-bokehjs", "version": src["version"], "core": src["core"], "api": src["api"]})
