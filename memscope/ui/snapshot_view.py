"""A CUDA memory snapshot, shown: one standalone HTML page (``memscope snapshot FILE --html OUT``) and the same view
in a notebook (``memscope.open_snapshot(FILE)``).

What it shows, per device: PyTorch's allocated and reserved bytes over the trace's time, each segment as a bar with
its blocks (allocated, waiting to be freed, free), the largest allocations with the Python frames that made them,
and the advice of ``analysis.snapshot``. Everything read from the file (frame names, file names) is escaped: the
page runs no script but Bokeh's.
"""

from __future__ import annotations

import html
from typing import Any, Mapping

from ..analysis import snapshot as snap_mod
from ..fmt import fmt_bytes
from .bokeh_format import HOVER_JS, TICK_JS
from .page import Page, render, write

__all__ = ["render_html", "write_html", "SnapshotView", "open_snapshot", "details_html"]

MAX_POINTS = 4000  # timeline points drawn per device (min/max per bucket beyond)
MAX_SEGMENTS = 300  # segment bars drawn per device (the largest; the rest are counted)
TOP_ALLOCATIONS = 12
STATE_COLORS = {"active_allocated": "#4c78a8", "active_pending_free": "#f58518", "inactive": "#e0e0e0"}
STATE_LABELS = {
    "active_allocated": "allocated",
    "active_pending_free": "freed, pending a stream",
    "inactive": "free (in the cache)",
}


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def decimate(x: list[float], ys: list[list[int]], n: int = MAX_POINTS) -> tuple[list[float], list[list[int]]]:
    """At most ~``n`` points: per bucket, the first point and those where the first series is lowest and highest,
    so that spikes survive."""
    if len(x) <= n:
        return x, ys
    per = max(1, (2 * len(x)) // n)
    keep: list[int] = []
    first = ys[0]
    for start in range(0, len(x), per):
        idx = range(start, min(len(x), start + per))
        lo = min(idx, key=lambda i: first[i])
        hi = max(idx, key=lambda i: first[i])
        keep.extend(sorted({start, lo, hi}))
    if keep[-1] != len(x) - 1:
        keep.append(len(x) - 1)
    return [x[i] for i in keep], [[y[i] for i in keep] for y in ys]


def _frame_text(f: Mapping[str, Any]) -> str:
    name = str(f.get("filename", "")).replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name}:{f.get('line')} in {f.get('name', '')}"


# -- HTML fragments (page and notebook alike) -------------------------------------------------------------------
def devices_table(summary: Mapping[str, Any]) -> str:
    """The snapshot's devices as an HTML table."""
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "device",
            "reserved",
            "allocated",
            "active",
            "free in segments",
            "largest free block",
            "segments",
            "trace events",
        )
    )
    rows = "".join(
        f"<tr><td>cuda:{d['device']}</td><td>{fmt_bytes(d['reserved_bytes'], 'torch')}</td>"
        f"<td>{fmt_bytes(d['allocated_bytes'], 'torch')}</td><td>{fmt_bytes(d['active_bytes'], 'torch')}</td>"
        f"<td>{fmt_bytes(d['free_in_segments_bytes'], 'torch')}</td><td>{fmt_bytes(d['largest_free_block_bytes'], 'torch')}</td>"
        f"<td>{d['segments']}</td><td>{d['trace_events']}</td></tr>"
        for d in summary["devices"]
    )
    return f"<table class='memscope-snap'><tr>{head}</tr>{rows}</table>"


def advice_html(summary: Mapping[str, Any]) -> str:
    """The snapshot's advice as an HTML list."""
    items = "".join(f"<li>{_esc(a)}</li>" for a in summary.get("advice") or [])
    return (
        f"<ul class='memscope-advice'>{items}</ul>"
        if items
        else "<div class='memscope-meta'>nothing to advise: PyTorch's cache holds little that is not in use</div>"
    )


def allocations_html(rows: list[dict[str, Any]]) -> str:
    """The largest allocations and their stacks, as HTML."""
    if not rows:
        return "<div class='memscope-meta'>no live allocations</div>"
    out = []
    for r in rows:
        frames = r["frames"]
        own = snap_mod.user_frames(frames)[:4]
        where = (
            "<br>".join(_esc(_frame_text(f)) for f in own)
            or "<span class='memscope-meta'>no frames (allocated before history recording started)</span>"
        )
        full = (
            (
                "<details><summary>all frames</summary><pre>"
                + _esc("\n".join(f"{f['filename']}:{f['line']} in {f['name']}" for f in frames))
                + "</pre></details>"
            )
            if frames
            else ""
        )
        out.append(
            f"<tr><td>{fmt_bytes(r['size'], 'torch')}</td><td>{_esc(r.get('segment_type') or '')}</td>"
            f"<td>{where}{full}</td></tr>"
        )
    return (
        "<table class='memscope-snap'><tr><th>size</th><th>pool</th><th>allocated at (your code first)</th>"
        f"</tr>{''.join(out)}</table>"
    )


def segments_bars_html(layout: list[dict[str, Any]], limit: int = MAX_SEGMENTS) -> str:
    """Segments as CSS bars (the notebook's view; the page draws them with Bokeh)."""
    if not layout:
        return "<div class='memscope-meta'>no segments</div>"
    widest = max(s["total_size"] for s in layout) or 1
    rows = []
    for s in layout[:limit]:
        cells = "".join(
            f"<div title='{_esc(STATE_LABELS.get(b['state'], b['state']))} {fmt_bytes(b['size'], 'torch')}' "
            f"style='width:{100 * b['size'] / s['total_size']:.3f}%;background:"
            f"{STATE_COLORS.get(b['state'], '#999')};height:100%;box-shadow:inset -1px 0 #fff'></div>"
            for b in s["blocks"]
            if s["total_size"]
        )
        rows.append(
            f"<div style='display:flex;height:6px;margin:1px 0;width:{100 * s['total_size'] / widest:.3f}%;"
            f"background:#f4f4f4'>{cells}</div>"
        )
    more = (
        f"<div class='memscope-meta'>{len(layout) - limit} smaller segments not drawn</div>"
        if len(layout) > limit
        else ""
    )
    return f"<div class='memscope-segments' style='max-width:900px'>{''.join(rows)}</div>{more}"


def legend_html() -> str:
    """The timeline's legend."""
    return " ".join(
        f"<span style='display:inline-block;width:10px;height:10px;background:{c}'></span> {_esc(STATE_LABELS[k])}"
        for k, c in STATE_COLORS.items()
    )


def details_html(snap: Mapping[str, Any], summary: Mapping[str, Any], bars: bool) -> str:
    """Per device: the segments (CSS bars when ``bars``) and the largest allocations."""
    parts = []
    for d in summary["devices"]:
        dev = d["device"]
        if bars:
            parts.append(
                f"<h3>cuda:{dev}: segments, largest first ({legend_html()})</h3>"
                + segments_bars_html(snap_mod.segment_layout(snap, dev))
            )
        parts.append(
            f"<h3>cuda:{dev}: largest allocations</h3>"
            + allocations_html(snap_mod.largest_allocations(snap, dev, TOP_ALLOCATIONS))
        )
    return "".join(parts)


# -- Bokeh figures (the page) -----------------------------------------------------------------------------------
def timeline_figure(snap: Mapping[str, Any], device: int) -> Any:
    """The allocation timeline (bokeh)."""
    # Re-exported by bokeh.models at run time, not in its type information (see report.memory_figure).
    from bokeh.models import CustomJSHover, CustomJSTickFormatter, DataRange1d, HoverTool, Legend, LegendItem, Span  # type: ignore[attr-defined]
    from bokeh.models.tickers import AdaptiveTicker
    from bokeh.plotting import figure

    tl = snap_mod.timeline(snap, device)
    x, (alloc, reserved) = decimate(tl["x"], [tl["allocated"], tl["reserved"]])
    label = "trace time (s)" if tl["unit"] == "s" else "trace event #"
    fig = figure(
        height=300,
        sizing_mode="stretch_width",
        title=f"cuda:{device}: allocated and reserved",
        x_axis_label=label,
        y_axis_label="memory",
        name=f"memscope-snapshot-timeline-{device}",
        y_range=DataRange1d(start=0),  # from zero: reserved vs allocated reads at a glance
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        toolbar_location="above",
    )
    fig.yaxis.ticker = AdaptiveTicker(
        base=1024, mantissas=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512], min_interval=1, num_minor_ticks=4
    )  # binary-round sizes, as in the run report
    fig.yaxis.formatter = CustomJSTickFormatter(code=TICK_JS)
    a = fig.step(x, alloc, mode="after", line_color="#4c78a8", line_width=2, name="allocated")
    r = fig.step(x, reserved, mode="after", line_color="#c62828", line_width=1.5, line_dash="dashed", name="reserved")
    for o in tl["ooms"]:
        fig.add_layout(Span(location=o["at"], dimension="height", line_color="#c62828", line_width=2))
    fig.add_tools(
        HoverTool(
            renderers=[a, r],
            tooltips=[("", "$name"), ("at", "$x"), ("memory", "$y{bytes}")],
            formatters={"$y": CustomJSHover(code=HOVER_JS)},
        )
    )
    fig.add_layout(
        Legend(
            items=[LegendItem(label="allocated", renderers=[a]), LegendItem(label="reserved", renderers=[r])],
            click_policy="hide",
        ),
        "right",
    )
    return fig


def segments_figure(snap: Mapping[str, Any], device: int) -> Any:
    """The segments and their blocks (bokeh)."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    layout = snap_mod.segment_layout(snap, device)[:MAX_SEGMENTS]
    frames_by_block = _block_frames(snap, device)
    data: dict[str, list[Any]] = {
        k: [] for k in ("left", "right", "bottom", "top", "color", "state", "size", "seg", "where")
    }
    for i, s in enumerate(layout):
        for b in s["blocks"]:
            data["left"].append(b["offset"] / (1 << 20))
            data["right"].append((b["offset"] + b["size"]) / (1 << 20))
            data["bottom"].append(i - 0.42)
            data["top"].append(i + 0.42)
            data["color"].append(STATE_COLORS.get(b["state"], "#999999"))
            data["state"].append(STATE_LABELS.get(b["state"], b["state"]))
            data["size"].append(fmt_bytes(b["size"], "torch"))
            data["seg"].append(f"#{i} ({fmt_bytes(s['total_size'], 'torch')}, {s.get('segment_type') or ''} pool)")
            key = (s["address"], b["offset"])
            data["where"].append(frames_by_block.get(key, ""))
    n = max(1, len(layout))
    fig = figure(
        height=max(220, min(1400, 6 * n + 80)),
        sizing_mode="stretch_width",
        title=f"cuda:{device}: segments, largest first (blue allocated, orange pending free, grey free)",
        x_axis_label="offset in the segment (MiB)",
        y_axis_label="segment",
        name=f"memscope-snapshot-segments-{device}",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        toolbar_location="above",
        y_range=(n - 0.5, -0.5),  # type: ignore[arg-type]  # bokeh takes a (start, end) pair for a Range1d
    )
    q = fig.quad(
        left="left",
        right="right",
        bottom="bottom",
        top="top",
        color="color",
        line_color="white",
        line_width=0.5,
        source=ColumnDataSource(data),
    )
    # Tooltip fields are escaped by Bokeh (no {safe}): frame names come from the file.
    fig.add_tools(
        HoverTool(renderers=[q], tooltips=[("segment", "@seg"), ("block", "@size @state"), ("allocated at", "@where")])
    )
    return fig


def _block_frames(snap: Mapping[str, Any], device: int) -> dict[tuple[Any, int], str]:
    out: dict[tuple[Any, int], str] = {}
    for s in snap.get("segments") or []:
        if int(s.get("device") or 0) != device:
            continue
        base, off = s.get("address"), 0
        for b in s.get("blocks") or []:
            addr = b.get("address")
            start = int(addr) - int(base) if isinstance(addr, int) and isinstance(base, int) else off
            off = start + int(b.get("size") or 0)
            fr = snap_mod.user_frames(list[Mapping[str, Any]](snap_mod.block_frames(b)))
            if fr:
                out[(base, start)] = _frame_text(fr[0])
    return out


# The snapshot's tables, beside the page's shared rules (page.CSS).
_CSS = """
  .memscope-snap { font-size: 12px; border-collapse: collapse; }
  .memscope-snap td, .memscope-snap th { padding: 2px 12px 2px 0; text-align: left; vertical-align: top; }
  .memscope-snap pre { font-size: 11px; margin: 2px 0; }
"""


class SnapshotPage:
    """A loaded CUDA snapshot as one standalone page: a ``page.Reporter``."""

    def __init__(self, snap: Mapping[str, Any], name: str = "", summary: Mapping[str, Any] | None = None) -> None:
        self.snap, self.name, self.summary = snap, name, summary

    def page(self) -> Page:
        """The devices and the advice, a timeline and the segments per device, the largest allocations."""
        return _snapshot_page(self.snap, self.name, self.summary)


def render_html(snap: Mapping[str, Any], name: str = "", summary: Mapping[str, Any] | None = None) -> str:
    """One standalone page (BokehJS inline: no CDN, no server) for a loaded snapshot."""
    return render(SnapshotPage(snap, name, summary))


def _snapshot_page(snap: Mapping[str, Any], name: str, summary: Mapping[str, Any] | None) -> Page:
    from bokeh.layouts import column

    summary = summary or snap_mod.summarize(snap)
    figs = []
    for d in summary["devices"]:
        figs.append(timeline_figure(snap, d["device"]))
        figs.append(segments_figure(snap, d["device"]))
    oom = snap_mod.oom_info(snap)
    oom_line = (
        (
            f"<div>saved by memscope at a CUDA OOM: an allocation of {fmt_bytes(oom.get('alloc_bytes'), 'torch')} "
            f"failed on cuda:{_esc(oom.get('device'))} ({fmt_bytes(oom.get('device_free'), 'torch')} free on the "
            f"device; this process could use {fmt_bytes(oom.get('device_total'), 'torch')})</div>"
        )
        if oom
        else ""
    )
    top = (
        f"<h1>CUDA memory snapshot: {_esc(name)}</h1>{oom_line}{devices_table(summary)}"
        f"<h2>What it says</h2>{advice_html(summary)}<h2>Over the trace, and the segments</h2>"
        + (
            ""
            if any(d["trace_events"] for d in summary["devices"])
            else "<div class='memscope-meta'>no trace in this snapshot (history recording was off): the timeline "
            "shows the end state only</div>"
        )
    )
    bottom = "<h2>Largest allocations</h2>" + details_html(snap, summary, bars=False)
    root = column(*figs, sizing_mode="stretch_width") if figs else column()
    return Page(f"memscope snapshot {name}", top, root, bottom, css=_CSS, roots_class="memscope-snap-charts")


def write_html(path: str, out_path: str) -> str:
    """Read the snapshot at ``path`` (safely) and write its page to ``out_path``; returns ``out_path``."""
    import os

    snap = snap_mod.load(path)
    return write(SnapshotPage(snap, os.path.basename(path)), out_path)


# -- the notebook -----------------------------------------------------------------------------------------------
class SnapshotView:
    """``memscope.open_snapshot(path)``: the summary (``.summary``, ``.advice``) and, displayed, the view: the
    timeline in the dashboard's chart widget, the segments as bars, the largest allocations, the advice."""

    def __init__(self, path: str) -> None:
        import os

        self.path = path
        self.snapshot = snap_mod.load(path)
        self.summary = snap_mod.summarize(self.snapshot)
        self.advice: list[str] = self.summary["advice"]
        self.name = os.path.basename(path)
        self._widget: Any = None

    def html(self) -> str:
        """The view without the timeline, as HTML (what a plain-HTML front end shows)."""
        return (
            f"<div class='memscope-snapshot'><b>CUDA memory snapshot: {_esc(self.name)}</b>"
            f"{devices_table(self.summary)}{advice_html(self.summary)}"
            f"{details_html(self.snapshot, self.summary, bars=True)}</div>"
        )

    def timeline_payload(self, device: int) -> dict[str, Any]:
        """The chart widget's payload: allocated and reserved over the trace."""
        tl = snap_mod.timeline(self.snapshot, device)
        x, (alloc, reserved) = decimate(tl["x"], [tl["allocated"], tl["reserved"]])
        return {
            "tree_pss_by_role": {},
            "main_rss": {"t": x, "y": alloc},
            "tree_rss": {"t": x, "y": reserved},
            "labels": {"main_rss": "allocated", "tree_rss": "reserved"},
        }

    @property
    def widget(self) -> Any:
        """The view as a widget (built on first use)."""
        if self._widget is None:
            import ipywidgets as w

            from .chart import MemoryChart

            kids: list[Any] = []
            for d in self.summary["devices"]:
                kids.append(
                    MemoryChart(
                        self.timeline_payload(d["device"]),
                        title=f"cuda:{d['device']}: allocated and reserved over the trace",
                        height=220,
                    )
                )
            kids.append(w.HTML(self.html()))
            self._widget = w.VBox(kids)
        return self._widget

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def __repr__(self) -> str:
        devs = ", ".join(
            f"cuda:{d['device']} reserved {fmt_bytes(d['reserved_bytes'], 'torch')} allocated "
            f"{fmt_bytes(d['allocated_bytes'], 'torch')}"
            for d in self.summary["devices"]
        )
        return f"<memscope snapshot {self.name}: {devs}>"


def open_snapshot(path: str) -> SnapshotView:
    """``memscope.open_snapshot``: a snapshot pickle, read safely, as a view."""
    return SnapshotView(path)
