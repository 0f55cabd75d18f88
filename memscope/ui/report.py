"""The HTML report of a finished run: one standalone page, what the notebook dashboard shows, readable offline.

``write_html(record, "report.html")`` (``memscope report RUN --html report.html``) writes a single file: the
verdict card, the memory chart (BokehJS inline, no CDN, no server), the process table and the last 200 lines of
the program's output. Everything that comes from the user's program (command line, output, exception messages,
tracebacks, command lines, phase names) is escaped: the page runs no script but Bokeh's and its own.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from ..analysis.summary import mark_running, stored_or_computed
from ..fmt import fmt_bytes, fmt_elapsed
from ..record.reader import RunData
from ..redact import redact_argv
from .bokeh_format import HOVER_JS as _HOVER_JS
from .bokeh_format import TICK_JS as _TICK_JS
from .census import census_html
from .fragments import (
    copy_on_read_marks,
    leak_line,
    output_tail,
    process_table,
    record_procs,
    stack_marks,
    stacks_html,
    verdict_card,
    with_gpu,
)
from .fragments import esc as _esc
from .page import Page, render, write
from .probes import any_shown, probes_html
from .series import RunSeries
from .terminal import limit_text

__all__ = ["write_html", "render_html", "output_lines", "memory_figure", "hidden_lines"]

TAIL_LINES = 200
LINE_MAX = 4000  # a single "line" longer than this (a log dumped without newlines) is cut in the page
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")

# The notebook chart's colours (chart.js), so the two views read the same.
ROLE_COLORS = {
    "main": "#4c78a8",
    "dataloader_worker": "#f58518",
    "compile_worker": "#b279a2",
    "rank": "#54a24b",
    "wrapper": "#9d755d",
    "helper": "#72b7b2",
    "other": "#bab0ac",
}
LINES = (  # key, legend label, style
    ("tree_pss", "tree PSS (total)", {"line_color": "#1f2d3d", "line_width": 1.2}),
    ("main_rss", "main RSS", {"line_color": "#e45756", "line_width": 2}),
    ("tree_rss", "tree RSS (sum)", {"line_color": "#888888", "line_width": 1, "line_dash": "dotted"}),
    ("host_available", "host available", {"line_color": "#2e7d32", "line_width": 1.5, "line_dash": "dashed"}),
    ("limit", "limit", {"line_color": "#c62828", "line_width": 2, "line_dash": "dashed"}),
)
PHASE_COLORS = {"train": "#54a24b", "eval": "#f58518"}
PHASE_OTHER = "#7b61ff"
HIDE_ABOVE = 4  # host available / limit start hidden when they exceed the run's own peak this many times
CMD_MAX = 2000  # characters of the command line shown at the top


# -- output --------------------------------------------------------------------------------------------------
def _last_state(line: str) -> str:
    """What a terminal shows of a line redrawn with carriage returns: the text after the last non-final \\r."""
    return line.rstrip("\r").rsplit("\r", 1)[-1]


def output_lines(chunks: Iterable[tuple[str, str]], keep: int = TAIL_LINES) -> list[str]:
    """The last ``keep`` lines of the program's output, from its recorded chunks ``(stream, text)`` in order.

    Each stream is assembled on its own (a chunk of stderr never splits a line of stdout), progress bars redrawn
    with ``\\r`` collapse to their last state, ANSI escapes (colours, cursor moves) are dropped, and the line each
    stream had not yet ended when the run did comes last.
    """
    from collections import deque

    out: deque[str] = deque(maxlen=keep)
    total = 0  # lines ended so far (all streams)
    partial: dict[str, str] = {}  # per stream, the line not ended yet
    at: dict[str, int] = {}  # per stream, ``total`` when its unfinished line was last written
    for stream, text in chunks:
        buf = partial.get(stream, "") + _ANSI.sub("", text)
        *lines, rest = buf.split("\n")
        for line in lines:
            out.append(_cut(_last_state(line)))
        total += len(lines)
        if "\r" in rest:  # a progress bar being redrawn: keep its latest state (and a pending \r)
            rest = _last_state(rest) + ("\r" if rest.endswith("\r") else "")
        partial[stream] = rest[-LINE_MAX * 4 :]
        at[stream] = total
    # A line left unfinished when the run ended (a progress bar, a prompt) goes where it was last written.
    tail = list(out)
    first = total - len(tail)
    for stream in sorted(partial, key=lambda s: at[s], reverse=True):
        text = partial[stream].rstrip("\r")
        if text and at[stream] >= first and (at[stream] > first or len(tail) < keep):
            tail.insert(at[stream] - first, _cut(_last_state(text)))
    return tail[-keep:]


def _cut(line: str, n: int = LINE_MAX) -> str:
    return line if len(line) <= n else line[:n] + f" … [{len(line) - n} more chars]"


def _recorded_output(rd: RunData) -> Iterable[tuple[str, str]]:
    for data in rd.output_data():
        try:
            d = json.loads(data)
        except (TypeError, ValueError):
            continue
        if isinstance(d, dict) and isinstance(d.get("text"), str):
            yield str(d.get("stream", "stdout")), d["text"]


# -- the chart -----------------------------------------------------------------------------------------------
def memory_figure(
    snap: dict[str, Any],
    phases: list[dict[str, Any]] | None = None,
    title: str = "",
    marks: list[dict[str, Any]] | None = None,
) -> Any:
    """A Bokeh figure of a ``RunSeries.snapshot()``: tree PSS stacked by role, the lines, phase bands, and a
    vertical mark at each ``marks`` time ({"t_s", "text"}: the stacks captures)."""
    # Re-exported by bokeh.models at run time, not in its type information: Any here (their own module's stubs
    # are narrower than what bokeh accepts, e.g. a glyph renderer of a Line in a LegendItem).
    from bokeh.models import (  # type: ignore[attr-defined]
        BoxAnnotation,
        ColumnDataSource,
        CustomJSHover,
        CustomJSTickFormatter,
        DataRange1d,
        HoverTool,
        Label,
        Legend,
        LegendItem,
        NumeralTickFormatter,
        Span,
    )
    from bokeh.models.tickers import AdaptiveTicker
    from bokeh.plotting import figure

    fig = figure(
        height=380,
        sizing_mode="stretch_width",
        title=title or None,
        name="memscope-chart",
        x_range=DataRange1d(range_padding=0.02, only_visible=True),
        y_range=DataRange1d(start=0, only_visible=True),
        x_axis_label="elapsed (s)",
        y_axis_label="memory",
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        toolbar_location="above",
    )
    fig.toolbar.active_scroll = None  # the wheel scrolls the page until the wheel zoom is turned on in the toolbar
    fig.xgrid.grid_line_alpha = fig.ygrid.grid_line_alpha = 0.4
    fig.xaxis.formatter = NumeralTickFormatter(format="0,0.[0]")
    # Ticks at binary-round sizes (64 MiB, 256 MiB, 1 GiB...), shown as MiB or GiB.
    fig.yaxis.ticker = AdaptiveTicker(
        base=1024, mantissas=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512], min_interval=1, num_minor_ticks=4
    )
    fig.yaxis.formatter = CustomJSTickFormatter(code=_TICK_JS)

    items: list[Any] = []
    by_role = snap.get("tree_pss_by_role") or {}
    roles = [r for r in by_role if by_role[r].get("t")]
    if roles:
        t = by_role[roles[0]]["t"]
        data: dict[str, list[Any]] = {"t": list(t)}
        for r in roles:
            data[r] = list(by_role[r]["y"])
        src = ColumnDataSource(data)
        areas = fig.varea_stack(
            stackers=roles,
            x="t",
            source=src,
            fill_alpha=0.6,
            color=[ROLE_COLORS.get(r, ROLE_COLORS["other"]) for r in roles],
        )
        for r, area in zip(roles, areas):
            area.name = f"pss:{r}"
        items += [LegendItem(label=r, renderers=[a]) for r, a in reversed(list(zip(roles, areas)))]
        total = [sum(data[r][i] for r in roles) for i in range(len(t))]
        lines = {"tree_pss": {"t": list(t), "y": total}}
    else:
        lines = {}
    for key in ("main_rss", "tree_rss", "host_available", "limit"):
        s = snap.get(key) or {}
        if s.get("t"):
            lines[key] = {"t": list(s["t"]), "y": list(s["y"])}
    # The host's available memory (and a generous limit) can dwarf the run: they start hidden then, so that the
    # run's own curves fill the plot; a click on their legend entry shows them (the y axis follows).
    own = max((v or 0 for k in ("tree_pss", "main_rss", "tree_rss") for v in lines.get(k, {}).get("y", [])), default=0)
    renderers: list[Any] = []  # GlyphRenderers (HoverTool's annotation wants DataRenderer, their base)
    hidden = []
    for key, label, style in LINES:
        if key not in lines:
            continue
        r = fig.line(x="t", y="y", source=ColumnDataSource(lines[key]), name=label, **style)
        if key in ("host_available", "limit") and own and max(lines[key]["y"], default=0) > HIDE_ABOVE * own:
            r.visible = False
            hidden.append(label)
        renderers.append(r)
        if key != "tree_pss":
            items.append(LegendItem(label=label, renderers=[r]))
    if renderers:
        fig.add_tools(
            HoverTool(
                renderers=renderers,
                line_policy="nearest",
                tooltips=[("", "$name"), ("elapsed", "@t{0,0.0} s"), ("memory", "@y{bytes}")],
                formatters={"@y": CustomJSHover(code=_HOVER_JS)},
            )
        )
    if items:
        fig.add_layout(
            Legend(
                items=items,
                click_policy="hide",
                label_text_font_size="11px",
                spacing=0,
                glyph_height=14,
                glyph_width=18,
                padding=6,
                border_line_alpha=0,
            ),
            "right",
        )

    ends = [s["t"][-1] for s in lines.values() if s["t"]]
    span = max(ends) if ends else 0.0
    for m in (marks or [])[-50:]:
        fig.add_layout(Span(location=m["t_s"], dimension="height", line_color="#c62828", line_dash="dashed"))
        fig.add_layout(
            Label(
                x=m["t_s"],
                y=18,
                y_units="screen",
                x_offset=3,
                text=str(m.get("text", ""))[:40],
                text_font_size="10px",
                text_color="#c62828",
            )
        )
    for p in (phases or [])[-400:]:
        a = p.get("start_s")
        if a is None:
            continue
        b = p.get("end_s") if p.get("end_s") is not None else span
        name = str(p.get("name", ""))
        fig.add_layout(
            BoxAnnotation(
                left=a,
                right=b,
                level="underlay",
                fill_alpha=0.10,
                line_alpha=0,
                fill_color=PHASE_COLORS.get(name, PHASE_OTHER),
            )
        )
        if span and (b - a) >= 0.04 * span:
            fig.add_layout(
                Label(
                    x=a,
                    y=4,
                    y_units="screen",
                    x_offset=3,
                    text=name[:60],
                    text_font_size="10px",
                    text_color="#555555",
                    text_alpha=0.9,
                )
            )
    if not lines:
        fig.add_layout(
            Label(x=10, y=10, x_units="screen", y_units="screen", text="no samples recorded", text_color="#999999")
        )
    fig.tags = [{"hidden": hidden}]
    return fig


def hidden_lines(fig: Any) -> list[str]:
    """The legend labels of the lines ``memory_figure`` started hidden."""
    return next((t["hidden"] for t in fig.tags if isinstance(t, dict) and "hidden" in t), [])


def _load(record_path: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    rd = RunData(record_path)
    try:
        row = rd.run_row()
        summary, stored = stored_or_computed(rd)
        lines = output_lines(_recorded_output(rd))
    finally:
        rd.close()
    return row, (summary if stored else mark_running(record_path, summary)), lines


def _procs(record_path: str, summary: dict[str, Any]) -> dict[int, dict[str, Any]]:
    rd = RunData(record_path)
    try:
        procs = record_procs(rd)
    finally:
        rd.close()
    for p in summary.get("processes") or []:  # the summary's exit signal also comes from a worker's fault dump
        if p.get("exit_signal") and p["pid"] in procs:
            procs[p["pid"]]["exit_signal"] = p["exit_signal"]
    return copy_on_read_marks(with_gpu(procs, gpu_peaks(summary)), summary.get("copy_on_read"))


def gpu_peaks(summary: dict[str, Any]) -> dict[int, int]:
    """pid -> the process's GPU peak (NVML's, else PyTorch's reserved) from the summary."""
    return {
        p["pid"]: p.get("peak_used_bytes")
        for p in (summary.get("gpu") or {}).get("processes") or []
        if p.get("pid") is not None
    }


class RunReport:
    """The report of the run recorded at ``record_path``: a ``page.Reporter``."""

    def __init__(self, record_path: str) -> None:
        self.record_path = record_path

    def page(self) -> Page:
        """The verdict, the chart, the stacks, census and probes when there are some, the processes, the output."""
        return _report_page(self.record_path)


def render_html(record_path: str) -> str:
    """The report of the run recorded at ``record_path``, as one standalone HTML page (BokehJS inline)."""
    return render(RunReport(record_path))


def _report_page(record_path: str) -> Page:
    row, summary, lines = _load(record_path)
    snap = RunSeries.from_record(record_path).snapshot()
    phases = summary.get("phases") or []
    ex = summary.get("exit") or {}
    cause = ex.get("cause", "unknown")
    command = " ".join(redact_argv(row.get("command") or summary.get("command") or []))
    peak = summary.get("peak") or {}
    duration = summary.get("duration_s") or 0.0
    status = (
        f"<div class='memscope-status' style='font-family:monospace;font-size:13px'>"
        f"<b>{_esc(cause)}</b> after {fmt_elapsed(duration)} ({duration:.1f} s) · "
        f"peak {fmt_bytes(peak.get('tree_pss_bytes') or peak.get('tree_rss_bytes'))} at "
        f"{peak.get('at_s') or 0:.1f} s · {_esc(limit_text(summary.get('limit')))} · "
        f"{_esc(leak_line(summary.get('leak') or {}, summary.get('spikes')))}</div>"
    )
    top = (
        f"<h1>memscope report: {_esc(summary.get('run_id') or row.get('id') or '')}</h1>"
        f"<div class='memscope-cmd'>$ {_esc(_cut(command, CMD_MAX))}</div>"
        f"<div class='memscope-meta'>started {_esc(row.get('started_at') or '')} in "
        f"{_esc(row.get('cwd') or '')}</div>{status}{verdict_card(summary)}<h2>Memory</h2>"
    )
    bottom = (
        f"<h2>Processes (each one's last round and its peaks)</h2>{process_table(_procs(record_path, summary))}"
        f"<h2>Output (last {TAIL_LINES} lines)</h2>"
        + (
            output_tail(lines)
            if lines
            else "<div class='memscope-meta'>no output recorded (the run's "
            "output was not captured, or it printed nothing)</div>"
        )
    )
    captures = summary.get("stacks") or []
    if captures:
        bottom = f"<h2>Stacks ({len(captures)} taken; the last first)</h2>{stacks_html(captures)}" + bottom
    censuses = summary.get("census") or []
    if censuses:
        bottom = f"<h2>Tensor census ({len(censuses)} taken; the last)</h2>{census_html(censuses[-1])}" + bottom
    if any_shown(summary):
        bottom = f"<h2>Loads and indexes</h2>{probes_html(summary)}" + bottom
    fig = memory_figure(snap, phases, marks=stack_marks(summary.get("stacks")))
    hidden = hidden_lines(fig)
    if hidden:
        bottom = (
            f"<div class='memscope-meta'>{_esc(' and '.join(hidden))}: far above the run's own memory, "
            f"hidden at first; click {'their legend entries' if len(hidden) > 1 else 'its legend entry'} "
            f"to show {'them' if len(hidden) > 1 else 'it'}.</div>"
        ) + bottom
    return Page(f"memscope {summary.get('run_id', '')}: {cause}", top, fig, bottom)


def write_html(record_path: str, out_path: str) -> str:
    """Write the report of ``record_path`` to ``out_path`` (one self-contained file); returns ``out_path``."""
    return write(RunReport(record_path), out_path)
