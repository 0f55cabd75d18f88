"""The live memory chart for notebooks: an anywidget that draws with BokehJS.

``MemoryChart(data)`` shows a ``RunSeries.snapshot()``: the tree's PSS stacked by role, the main process's RSS,
the summed RSS of the tree, the host's available memory and the limit (dashed), and phase bands. Assigning
``chart.data`` (or calling ``chart.update(snapshot)``) updates the plot's data sources in place.

The series do not travel in the widget's state: resent whole at every push, a week-long window was ~300 KiB a
push. Each change sends only what differs from what the browser holds (``ChartWire``: per line, how many points to
keep and the new tail, as float32 buffers in a custom message), and a view that has nothing (a reload, a second
tab, a notebook reopened while the kernel lives) asks for the whole window once. Phases, marks and labels, small
and capped, are the synced ``meta`` trait.

BokehJS comes from the installed ``bokeh`` wheel (``bokeh.min.js`` + ``bokeh-api.min.js``), inline: no CDN, no
server, no IFrame. Its text travels once per kernel, in the state of a single hidden ``_BokehJS`` widget that every
chart references; the browser injects it at most once per window (``chart.js``). Works with anywidget >= 0.9 and
ipywidgets 7.7 or 8.
"""

from __future__ import annotations

import threading
import uuid
from array import array
from collections import deque
from pathlib import Path
from typing import Any, Mapping

import anywidget
import traitlets
from ipywidgets import widget_serialization

__all__ = ["MemoryChart", "ChartWire", "chart_payload", "count_points", "bokehjs_source", "bokehjs_loader"]

_ESM = (Path(__file__).with_name("chart.js")).read_text(encoding="utf-8")

_SERIES_KEYS = ("main_rss", "host_available", "limit", "tree_rss")
_SCALAR_KEYS = ("version", "t_last", "ended")
_META_KEYS = ("phases", "marks", "labels")
_PHASES_SENT = 400  # the chart draws the last 400 phases (chart.js MAX_PHASES)
_NAME_MAX = 80  # a phase's name is the program's text: cut, so that 400 of them stay a few tens of kB
DATA_MSG, WINDOW_REQUEST = "memscope-data", "memscope-window?"


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
BokehJS = _BokehJS  # the loader widget's class, for views that hold one (ui/fit_view.py)
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
        out.append(
            {"name": str(name)[:_NAME_MAX], "start_s": float(start), "end_s": None if end is None else float(end)}
        )
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


def _keyed(payload: Mapping[str, Any]) -> dict[str, tuple[list, list]]:
    """A payload's lines by wire key: ``role:<name>`` for the stacked roles, then the four lines."""
    out = {f"role:{r}": (s["t"], s["y"]) for r, s in (payload.get("tree_pss_by_role") or {}).items()}
    for k in _SERIES_KEYS:
        if k in payload:
            out[k] = (payload[k]["t"], payload[k]["y"])
    return out


def _prefix(a: list, b: list) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (slice compares run in C; the usual change is
    an append or a rewritten last bucket, a merge of buckets rewrites all)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _f32(values: list) -> bytes:
    return array("f", [float("nan") if v is None else float(v) for v in values]).tobytes()


# A message's buffers at most (one line's tail can be more: it then travels alone). With the meta (phases) and
# the process table that may change in the same push, a push stays under 64 KiB.
PART_BYTES = 32 * 1024


class ChartWire:
    """What the browser holds of a chart's lines, and the messages that bring it up to date.

    ``delta(payload)`` gives the messages ``(content, buffers)`` to send after a change (none if no line changed):
    per line (``series``: ``[key, k, t_buffer, y_buffer]``) the browser keeps its first ``k`` points and appends
    the buffers' (little-endian float32; equal buffers are sent once a message); ``keys`` lists every line
    (others are dropped). ``base`` is the ``seq`` a message applies to: a browser holding another one asks for
    the whole window, which ``full()`` gives (its first message's ``base`` is None). A change bigger than
    ``PART_BYTES`` (a merge of the series' buckets rewrites a line, a whole window is ~110 KiB at 2,000 points a
    line) goes in several messages, each based on the one before; all but the last say ``more``, and the browser
    draws after the last. Not thread-safe: the chart calls it under its lock."""

    def __init__(self) -> None:
        self.seq = 0
        self.sent: dict[str, tuple[list, list]] = {}

    def _messages(self, lines: dict[str, tuple[list, list]], ks: dict[str, int], base: int | None) -> list:
        out: list[tuple[dict, list]] = []
        keys = list(lines)

        def part(entries: list, buffers: list[bytes]) -> None:
            nonlocal base
            self.seq += 1
            out.append(({"type": DATA_MSG, "seq": self.seq, "base": base, "keys": keys, "series": entries}, buffers))
            base = self.seq

        entries: list = []
        buffers: list[bytes] = []
        index: dict[bytes, int] = {}
        size = 0
        for key, k in ks.items():
            tb, yb = _f32(lines[key][0][k:]), _f32(lines[key][1][k:])
            add = (0 if tb in index else len(tb)) + (0 if yb in index else len(yb))
            if entries and size + add > PART_BYTES:
                part(entries, buffers)
                entries, buffers, index, size = [], [], {}, 0
            ids = []
            for b in (tb, yb):
                if b not in index:
                    index[b] = len(buffers)
                    buffers.append(b)
                    size += len(b)
                ids.append(index[b])
            entries.append([key, k, *ids])
        part(entries, buffers)
        for content, _ in out[:-1]:
            content["more"] = True
        return out

    def delta(self, payload: Mapping[str, Any]) -> list[tuple[dict, list]]:
        lines = _keyed(payload)
        ks: dict[str, int] = {}
        for key, (t, y) in lines.items():
            old = self.sent.get(key)
            k = 0 if old is None else min(_prefix(old[0], t), _prefix(old[1], y))
            if old is None or not (k == len(t) == len(old[0]) == len(y) == len(old[1])):
                ks[key] = k
        if not ks and list(lines) == list(self.sent):
            return []
        self.sent = lines
        return self._messages(lines, ks, self.seq)

    def full(self) -> list[tuple[dict, list]]:
        return self._messages(self.sent, {key: 0 for key in self.sent}, None)


def _meta(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The synced ``meta`` trait: marks, labels, and the last phases as ``[name, start_s, end_s]`` (ms), the
    short form chart.js reads too (400 phases in ~12 KiB instead of ~23)."""
    meta = {k: payload[k] for k in _META_KEYS if k in payload}
    if "phases" in meta:
        meta["phases"] = [
            [p["name"], round(p["start_s"], 3), None if p["end_s"] is None else round(p["end_s"], 3)]
            for p in meta["phases"][-_PHASES_SENT:]
        ]
    return meta


class MemoryChart(anywidget.AnyWidget):
    """A live memory chart. ``MemoryChart(series.snapshot(), title="train.py")``; then ``chart.update(snap)``.

    ``data`` (a snapshot, normalised by :func:`chart_payload`) stays in the kernel; its lines reach the browser as
    ``ChartWire`` messages. Traits synced with the browser: ``meta`` (phases, marks, labels), ``title``, ``height``
    (pixels), ``window_s`` (what the x axis shows while it follows the run: 0 the whole run, else its
    last ``window_s`` seconds; the chart's "show" menu sets it), and ``rendered_points`` (set by the browser: the points it draws, see
    :func:`count_points`; 0 until a view has rendered)."""

    _esm = _ESM
    data = traitlets.Dict()
    meta = traitlets.Dict().tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    height = traitlets.Int(320).tag(sync=True)
    rendered_points = traitlets.Int(0).tag(sync=True)
    window_s = traitlets.Int(0).tag(sync=True)
    _bokeh_version = traitlets.Unicode("").tag(sync=True)
    _bokehjs = traitlets.Instance(_BokehJS, allow_none=True).tag(sync=True, **widget_serialization)
    _uid = traitlets.Unicode("").tag(sync=True)  # the browser keeps the lines it holds under this key

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        title: str = "",
        height: int = 320,
        spread: bool = False,
        **kwargs: Any,
    ) -> None:
        self.spread = spread  # pushes to come: a change's parts may wait for the next (then ``flush()`` at the end)
        self._wire = ChartWire()
        self._queue: deque[tuple[dict, list]] = deque()  # parts of a change not sent yet (see _data_changed)
        self._wire_lock = threading.Lock()  # pushes come from the dashboard's thread, window requests from the kernel's
        super().__init__(
            title=title,
            height=height,
            _bokeh_version=bokeh_version(),
            _bokehjs=bokehjs_loader(),
            _uid=uuid.uuid4().hex,
            **kwargs,
        )
        self.on_msg(self._on_custom_msg)
        self.data = dict(data or {})

    @traitlets.validate("data")
    def _valid_data(self, proposal: Any) -> dict[str, Any]:
        return chart_payload(proposal["value"])

    @traitlets.observe("data")
    def _data_changed(self, change: Any) -> None:
        payload = change["new"]
        meta = _meta(payload)
        if meta != self.meta:
            self.meta = meta
        with self._wire_lock:
            first = self._wire.seq == 0  # the first window (a reopened run's may be whole): sent at once
            self._queue.extend(self._wire.delta(payload))
            self._send_queued(float("inf") if first or not self.spread else PART_BYTES)

    def _send_queued(self, budget: float) -> None:
        """Send queued parts, at least one, up to ``budget`` bytes of buffers. A merge of the series' buckets
        rewrites every line at once (~60 KiB): with ``spread``, it goes over this push and the next, so that no
        push carries much more than PART_BYTES; the browser draws the change after its last part."""
        spent = 0
        while self._queue:
            content, buffers = self._queue[0]
            size = sum(len(b) for b in buffers)
            if spent and spent + size > budget:
                return
            self._queue.popleft()
            self.send(content, buffers)
            spent += size

    def flush(self) -> None:
        """Send every part still queued (the dashboard's last push: no push comes after it)."""
        with self._wire_lock:
            self._send_queued(float("inf"))

    def update(self, snapshot: Mapping[str, Any]) -> None:
        """Show a new snapshot (same as assigning ``data``)."""
        self.data = snapshot  # type: ignore[assignment]

    def _on_custom_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, Mapping) and content.get("type") == WINDOW_REQUEST:
            with self._wire_lock:
                self._queue.clear()  # the whole window supersedes them (they apply to a window the browser drops)
                for msg, buffers in self._wire.full():
                    self.send(msg, buffers)
            return
        # A host that exposes no widget manager to the module and never instantiated the loader asks for BokehJS.
        if isinstance(content, Mapping) and content.get("type") == "memscope-bokehjs?":
            src = bokehjs_source()
            self.send({"type": "memscope-bokehjs", "version": src["version"], "core": src["core"], "api": src["api"]})
