"""The job view: every node of a multi-node run, read from Prometheus (``memscope.cluster``), live or as a page.

``ClusterView`` is a notebook widget: a status line, a table (per hostname and rank: PSS now, each role's leak
verdict and slope, the node's exit cause), and one dashboard chart per hostname/rank (``MemoryChart``: PSS stacked
by role, the host's available memory and the limit), refreshed from Prometheus every few seconds on its own thread
until every node has ended or the view is closed. ``write_html`` writes the same as one standalone page (Bokeh,
like ``memscope report --html``). Everything shown comes from Prometheus labels (hostnames, commands): escaped.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

from ..errors import ClusterError
from ..fmt import fmt_bytes
from ..record.cluster import Job, Panel, load_job
from .page import Page, render, write

__all__ = ["ClusterView", "cluster", "render_html", "write_html", "job_table", "text_table"]

REFRESH_S = 5.0
STALE_S = 600.0  # the live view stops refreshing after this long without new data
CHART_HEIGHT = 240


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _leak_text(leak: dict[str, Any]) -> str:
    v = leak.get("verdict", "insufficient_data")
    slope = leak.get("slope")
    if v == "insufficient_data" or slope is None:
        return "not enough data yet"
    rate = f"{'+' if slope >= 0 else '-'}{fmt_bytes(int(abs(slope) * 60))}/min"
    return f"LEAK {rate}" if v == "leak" else f"no leak ({rate})"


def _exit_text(p: Panel) -> str:
    if p.exit is None:
        return "running"
    return p.exit["cause"] + (f" ({p.exit['signal']})" if p.exit.get("signal") else "")


def job_table(job: Job) -> str:
    """The job as an HTML table: one row per hostname/rank."""
    rows = []
    for p in job.panels:
        leaks = "<br>".join(
            f"<span style='color:{'#c62828' if v.get('verdict') == 'leak' else 'inherit'}'>{_esc(role)}: "
            f"{_esc(_leak_text(v))}</span>"
            for role, v in sorted(p.leak.items())
        )
        rows.append(
            f"<tr><td>{_esc(p.hostname)}</td><td>{_esc(p.rank or '-')}</td>"
            f"<td>{_esc(', '.join(p.roles) or '-')}</td><td style='text-align:right'>"
            f"{_esc(fmt_bytes(p.now_bytes()) if p.roles else '-')}</td><td style='text-align:right'>"
            f"{_esc(fmt_bytes(p.peak_bytes()) if p.roles else '-')}</td><td>{leaks or '-'}</td>"
            f"<td>{_esc(_exit_text(p))}</td></tr>"
        )
    return (
        "<style>.memscope-cluster td, .memscope-cluster th {padding: 2px 10px 2px 0; text-align: left;"
        " vertical-align: top}</style>"
        "<table class='memscope-cluster' style='border-collapse:collapse;font-size:12px'>"
        "<tr><th>hostname</th><th>rank</th><th>roles</th><th>PSS (last)</th><th>PSS (peak)</th>"
        "<th>leak (floor slope)</th>"
        "<th>exit</th></tr>" + "".join(rows) + "</table>"
    )


def _status(job: Job, note: str = "") -> str:
    ended = sum(1 for h in job.hostnames if any(p.exit for p in job.panels if p.hostname == h))
    ranks = sorted(
        {p.rank for p in job.panels if p.rank}, key=lambda r: (not r.isdigit(), int(r) if r.isdigit() else 0, r)
    )
    leaking = [f"{p.title}" for p in job.panels if any(v.get("verdict") == "leak" for v in p.leak.values())]
    span = max((p.chart_data()["t_last"] for p in job.panels), default=0.0)
    parts = [
        f"{len(job.hostnames)} node(s), {len(ranks)} rank(s)",
        f"{ended} ended",
        f"{span:.0f} s of data from {job.url} {job.selector}",
        f"leak on {', '.join(leaking)}" if leaking else "no leak seen",
    ]
    return (
        "<div class='memscope-status' style='font-family:monospace;font-size:12px'>"
        + _esc(" · ".join(parts))
        + (f" · <i>{_esc(note)}</i>" if note else "")
        + "</div>"
    )


def text_table(job: Job) -> str:
    """The job for a terminal: one line per hostname/rank."""
    lines = [f"{'hostname':20} {'rank':>4}  {'PSS last':>10}  {'PSS peak':>10}  {'exit':14}  leak"]
    for p in job.panels:
        leak = "; ".join(f"{role}: {_leak_text(v)}" for role, v in sorted(p.leak.items())) or "-"
        now, peak = (fmt_bytes(p.now_bytes()), fmt_bytes(p.peak_bytes())) if p.roles else ("-", "-")
        lines.append(f"{p.hostname[:20]:20} {p.rank or '-':>4}  {now:>10}  {peak:>10}  {_exit_text(p)[:14]:14}  {leak}")
    return "\n".join(lines)


class ClusterView:
    """The job view in a notebook; ``view.widget`` is what is displayed, ``view.close()`` stops refreshing."""

    def __init__(
        self,
        url: str,
        *,
        run: str | None = None,
        job: str | None = None,
        since: str | float = "6h",
        refresh_s: float = REFRESH_S,
        first: Job | None = None,
    ) -> None:
        import ipywidgets as w

        self._run, self._job, self._since = run, job, since
        self.url = url
        self.refresh_s = refresh_s
        self.job = first or self._load()  # raises ClusterError: one line, nothing shown
        self.status = w.HTML()
        self.table = w.HTML()
        self.charts: dict[tuple[str, str], Any] = {}
        self._box = w.VBox()
        self.widget = w.VBox([self.status, self.table, self._box])
        self.refreshes = 0
        self._version = 0
        self._closed = threading.Event()
        self._show(self.job)
        self._thread = threading.Thread(target=self._loop, name="memscope-cluster", daemon=True)
        self._thread.start()

    def _show(self, job: Job, note: str = "") -> None:
        from .chart import MemoryChart

        self._version += 1
        self.status.value = _status(job, note)
        self.table.value = job_table(job)
        added = False
        for p in job.panels:
            key = (p.hostname, p.rank)
            if key not in self.charts:
                self.charts[key] = MemoryChart(title=p.title, height=CHART_HEIGHT)
                added = True
            self.charts[key].update(p.chart_data(self._version))
        if added:
            self._box.children = [self.charts[(p.hostname, p.rank)] for p in job.panels]
        self.job = job
        self.refreshes += 1

    @property
    def ended(self) -> bool:
        """Whether every node's run has ended."""
        return bool(self.job.hostnames) and all(
            any(p.exit for p in self.job.panels if p.hostname == h) for h in self.job.hostnames
        )

    def _loop(self) -> None:
        last_t, since = self._t_last(), time.monotonic()
        while not self.ended and not self._closed.wait(self.refresh_s):
            if time.monotonic() - since > STALE_S:  # nodes gone without an exit (memscope itself killed)
                self.status.value = _status(self.job, f"no new data for {STALE_S / 60:.0f} min: stopped refreshing")
                return
            try:
                self._show(self._load())
                if self._t_last() != last_t:
                    last_t, since = self._t_last(), time.monotonic()
            except ClusterError as exc:  # Prometheus restarting: say so, keep the last picture, try again
                self.status.value = _status(self.job, f"refresh failed: {exc}")
            except Exception as exc:  # a view must never take the kernel down
                self.status.value = _status(self.job, f"refresh failed: {exc!r}")

    def _load(self) -> Job:
        """The job as Prometheus holds it now (ClusterError: one line)."""
        return load_job(self.url, run=self._run, job=self._job, since=self._since)

    def _t_last(self) -> float:
        """Unix time of the job's newest memory point."""
        return self.job.t0 + max((p.chart_data()["t_last"] for p in self.job.panels), default=0.0)

    def refresh(self) -> None:
        """Read Prometheus now (the thread does it every ``refresh_s``)."""
        self._show(self._load())

    def close(self) -> None:
        """Stop refreshing."""
        self._closed.set()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def cluster(
    url: str, *, run: str | None = None, job: str | None = None, since: str | float = "6h", refresh_s: float = REFRESH_S
) -> ClusterView:
    """``memscope.cluster``: the job's view in a notebook, refreshed until every node has ended."""
    return ClusterView(url, run=run, job=job, since=since, refresh_s=refresh_s)


class JobPage:
    """The job as one standalone page, the table then a chart per hostname/rank: a ``page.Reporter``."""

    def __init__(self, job: Job) -> None:
        self.job = job

    def page(self) -> Page:
        """The job's status, commands and table above its charts."""
        from bokeh.layouts import column

        from .report import memory_figure

        job = self.job
        figs = []
        for p in job.panels:
            fig = memory_figure(p.chart_data(), title=p.title)
            fig.height = CHART_HEIGHT + 60
            figs.append(fig)
        top = (
            f"<h1>memscope job view</h1>{_status(job)}"
            f"<div class='memscope-meta'>{_esc(time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(job.t0)))} "
            f"(0 s on the charts) to {_esc(time.strftime('%H:%M:%S', time.localtime(job.end)))}</div>"
            + "".join(f"<div class='memscope-cmd'>{_esc(h)}: $ {_esc(_command(job, h))}</div>" for h in job.hostnames)
            + job_table(job)
            + "<h2>Memory by hostname and rank (PSS stacked by role)</h2>"
        )
        return Page("memscope job view", top, column(*figs, sizing_mode="stretch_width"))


def render_html(job: Job) -> str:
    """The job as one standalone page: the table, then a chart per hostname/rank (BokehJS inline)."""
    return render(JobPage(job))


def _command(job: Job, hostname: str) -> str:
    return next((p.command for p in job.panels if p.hostname == hostname and p.command), "")


def write_html(job: Job, out_path: str) -> str:
    """Write the job's standalone page to ``path``; returns the path."""
    return write(JobPage(job), out_path)
