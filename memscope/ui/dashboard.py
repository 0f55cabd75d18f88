"""The notebook dashboard of one run: status line, memory chart, process table, output tail, buttons, and the
verdict card when the run ends.

It owns no data: it subscribes to the run's records (or reads a finished run's record) through RunSeries,
and pushes at most 4 updates a second to the browser. The panels with state of their own are ``dashboard_panels``'
(notes, phases and marks, the live leak verdict, Scalene snapshots, the static copy), the buttons
``dashboard_buttons``'. One updater thread per dashboard, which ends with the run
or when the dashboard is closed (re-running a cell closes the dashboard it made before).
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

import ipywidgets as w
import psutil

from ..fmt import fmt_bytes, fmt_elapsed
from ..redact import redact_argv
from ..session.run import started_here
from .chart import MemoryChart, count_points
from .dashboard_buttons import SCALENE_SECONDS, Buttons
from .dashboard_panels import (
    LEAK_PERIOD_S,
    LiveCopyOnRead,
    LiveLeak,
    Notes,
    OtherRuns,
    PhaseMarks,
    ScalenePanel,
    StaticCopy,
)
from .fragments import (
    CAUSE_COLOR,
    copy_on_read_marks,
    esc,
    leak_line,
    output_tail,
    process_table,
    record_procs,
    stopping_card,
    verdict_card,
    with_gpu,
)
from .gpu_chart import GpuSeries
from .probes import ProbesFeed
from .series import RunSeries
from .terminal import limit_text

if TYPE_CHECKING:
    from ..session.run import Run

PUSH_PERIOD_S = 0.25  # at most 4 updates a second reach the browser
# A push sends only new points (chart.ChartWire), but the browser redraws the whole (decimated) window, ~15,000
# points on a long run: so a big window is pushed less often, one second more per 8,000 points, 2 s at most.
POINTS_PER_S = 8000
MAX_PUSH_PERIOD_S = 2.0
# The static copy (a saved notebook without its kernel; the live text where the dashboard cannot be drawn) is
# refreshed this often while the run goes, and at the end.
FALLBACK_PERIOD_S = 2.0
# Exited processes the live table shows (the latest; all once the run has ended): it is resent at every push, and
# DataLoader workers restarted every epoch would make it hundreds of rows (~150 KiB a push, thousands of DOM
# nodes) in a day.
TABLE_EXITED = 10
__all__ = ["LEAK_PERIOD_S", "SCALENE_SECONDS", "Dashboard", "reopen", "show", "view_bundle"]
_by_cell: dict[str, "Dashboard"] = {}
last: "Dashboard | None" = None  # the most recent dashboard shown (for tests and for the curious)


def push_period(points: int) -> float:
    """Seconds until the next push, after one that carried ``points`` chart points."""
    return min(MAX_PUSH_PERIOD_S, max(PUSH_PERIOD_S, points / POINTS_PER_S))


class Dashboard:
    """Widgets for one run. ``Dashboard(run)`` follows a live run; ``reopen(ref)`` shows a finished one."""

    def __init__(
        self,
        run: "Run | None" = None,
        *,
        series: RunSeries | None = None,
        summary: dict[str, Any] | None = None,
        procs: dict[int, dict[str, Any]] | None = None,
        title: str = "",
        gpu: GpuSeries | None = None,
        others: "Sequence[Run]" = (),
    ) -> None:
        """``others``: the runs of this kernel still going besides ``run``, each shown with its Stop."""
        self.run = run
        self.request: str | None = None  # the execute_request that showed it (a cell's run and its redisplay)
        self.gpu = gpu or GpuSeries()  # before the subscription below feeds it
        self._gpu_version = -1
        self._record_procs = procs or {}
        self.marks = PhaseMarks()
        self._unsubscribe_phases: Callable[[], None] | None = None
        self._release_lock = threading.Lock()
        self._released = False
        self._thread: threading.Thread | None = None
        if series is None and run is not None:
            # Phases: this view's own subscription, seeded from what the record already holds.
            self._unsubscribe_phases = run.subscribe(self._on_record)
            series = RunSeries.follow(run)  # the history so far, roles included, then every new record
            for e in _recorded_phases(run.record_path):
                self.marks.add_event(e)
            self.gpu.load(run.record_path)
        self.series = series or RunSeries()
        self._closed = threading.Event()
        # Wakes the updater before its period is up: a stop asked for (the card says "stopping…" at once), the run's
        # end (its verdict as soon as the processes are gone, not up to a 2 s push period later).
        self._wake = threading.Event()
        self._stopping: dict[str, Any] | None = None  # the stop_requested event's data and time
        self.leak = LiveLeak()
        self.copy_on_read = LiveCopyOnRead()
        self.status = w.HTML()
        self.chart = MemoryChart(title=title, height=300, spread=True)
        self.gpu_chart: MemoryChart | None = None  # made with the run's first GPU data, never before
        self.table = w.HTML()
        self.output = w.HTML()
        self.card = w.HTML()
        self.notes = Notes()
        self.census = w.HTML()
        self.stacks = w.HTML()  # the last stacks taken (the Stacks button)
        self.probes = w.HTML()  # NumPy loads, FAISS indexes, glibc heap
        self._probe_feed = ProbesFeed(run)
        self.scalene = ScalenePanel()
        self.buttons = Buttons(run, self.census, self.stacks, self.scalene) if run is not None else None
        self.controls = self.buttons.controls if self.buttons is not None else None
        self.others = OtherRuns(list(others))
        parts: list[w.Widget] = [self.status, self.notes.widget, self.others.widget, self.card]
        if self.controls is not None:
            parts.append(self.controls)
        # The census and the stacks (tall) go below the chart: above it, they pushed the chart off screen.
        acc = w.Accordion(children=[self.table, self.output, self.scalene.widget, self.probes])
        parts += [self.chart, self.census, self.stacks, acc]
        self.widget = w.VBox(parts)
        self.key = uuid.uuid4().hex[:12]
        self.widget.add_class(f"memscope-live-{self.key}")  # pairs the live view with its static copy
        self.copy = StaticCopy(self.key)
        self.widget.children = (*self.widget.children, self.copy.keeper)
        for i, name in enumerate(("Processes", "Output (last 200 lines)", "Scalene snapshots", "Loads and indexes")):
            try:
                acc.set_title(i, name)
            except Exception:
                pass
        acc.selected_index = 0
        if run is not None:
            wake = weakref.ref(self._wake)
            run.on_end(lambda _run: (lambda e: e.set() if e is not None else None)(wake()))
            self._thread = threading.Thread(target=self._loop, name="memscope-dashboard", daemon=True)
            self._thread.start()
        else:
            self._push(final_summary=summary)

    # -- data in ---------------------------------------------------------------------------------------------
    def _on_record(self, rec: Any) -> None:
        name = type(rec).__name__
        if name == "Event" and rec.kind in ("phase", "epoch"):  # epochs: where the training starts
            self.marks.add_event({"t": rec.t, "pid": rec.pid, "kind": rec.kind, "data": rec.data})
        elif name == "Event" and rec.kind == "stacks":  # a mark on the chart
            self.marks.add_stacks(rec.t, rec.data.get("reason"))
        elif name == "Event" and rec.kind == "stop_requested" and self._stopping is None:
            self._stopping = dict(rec.data or {}, t=rec.t)
            self._wake.set()
        self.gpu.add(rec)

    def note(self, line: str) -> None:
        """Show one of memscope's own lines about the run (a warning) under the status line (the last ten)."""
        self.notes.add(line)

    @property
    def _notes(self) -> list[str]:
        """The notes shown so far (tests and kernels read them)."""
        return self.notes.lines

    def _action(self, action: str) -> str:
        """Press a button (``stop``, ``kill``, ``scalene``, ``census``, ``stacks``); returns the controls' line."""
        assert self.buttons is not None
        return self.buttons.action(action)

    # -- data out --------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        run = self.run
        assert run is not None
        version = -1
        period = PUSH_PERIOD_S
        while not self._closed.is_set():
            ended = run.ended
            if self.series.changed_since(version) or ended:
                version = self.series.version
                try:
                    points = self._push(final_summary=cast("dict[str, Any]", run.wait(5)) if ended else None)
                    period = push_period(points)
                except Exception:
                    pass
            if ended:
                self.chart.flush()  # no push comes after this one: the parts of its change that wait go now
                break
            self._wake.wait(period)
            self._wake.clear()
        self._release()

    def _release(self) -> None:
        """Drop this dashboard's subscriptions to the run (once; from the updater's end or from close())."""
        with self._release_lock:
            if self._released:
                return
            self._released = True
        if self._unsubscribe_phases is not None:
            self._unsubscribe_phases()
        self._probe_feed.close()
        self.series.close()

    def _push(self, final_summary: dict[str, Any] | None = None) -> int:
        """Send the current window to the widgets; returns how many chart points it held."""
        snap = self.series.snapshot()
        end = (final_summary or {}).get("duration_s") or (self.run.elapsed() if self.run else 0.0)
        snap["phases"] = self.marks.phases(final_summary, end, self._procs())
        snap["marks"] = self.marks.marks(final_summary)
        self.chart.data = snap
        if self.gpu.has_data and self.gpu.version != self._gpu_version:
            self._gpu_version = self.gpu.version
            data = self.gpu.snapshot({pid: d.get("role", "other") for pid, d in self._procs().items()})
            if self.gpu_chart is None:
                self.gpu_chart = MemoryChart(data, title="GPU memory", height=220)
                kids = list(self.widget.children)
                kids.insert(kids.index(self.chart) + 1, self.gpu_chart)
                self.widget.children = tuple(kids)
            else:
                self.gpu_chart.data = data
        procs = with_gpu(self._procs(), self.gpu.per_pid(peak=final_summary is not None))
        cor = (
            final_summary.get("copy_on_read")
            if final_summary is not None
            else self.copy_on_read.update(self.run, procs)
        )
        self.table.value = process_table(  # every process once the run has ended: no push comes after
            copy_on_read_marks(procs, cor),
            max_exited=None if final_summary is not None else TABLE_EXITED,
        )
        self.probes.value = self._probe_feed.html(final_summary)
        if self.run is not None:
            self.output.value = output_tail(list(self.run.output_tail), self.run.output_partial)
        self.status.value = self._status_html(snap, final_summary)
        if self.others.runs:
            self.others.refresh()
        self.copy.snap = snap
        if final_summary is None and self._stopping is not None and self.run is not None:
            self.card.value = stopping_card(self._stopping, self.run.elapsed())
        if final_summary is not None:
            self.card.value = verdict_card(final_summary)
            if final_summary.get("census") and not self.census.value:  # a reopened run: its last census
                from .census import census_html

                self.census.value = census_html(final_summary["census"][-1])
            self.scalene.show_recorded(final_summary.get("scalene") or [])  # a reopened run
            if self.buttons is not None:
                self.buttons.ended()
        if final_summary is not None or time.monotonic() - self.copy.at >= FALLBACK_PERIOD_S:
            self._update_fallback()
        return count_points(snap)

    # -- the static copy -------------------------------------------------------------------------------------
    def static_html(self) -> str:
        """The dashboard as it is now, as static HTML (what a saved notebook shows without its kernel)."""
        run = self.run
        stop = ""
        if run is not None and not run.ended:
            stop = (
                f"Stop: run.stop()  (the run {run.run_id}, pid {run.pid}: memscope.last_run() is the latest, "
                "memscope.runs() lists every run of this kernel still going)"
            )
        return self.copy.html(self.status.value + self.others.html(), self.card.value, self.table.value, stop=stop)

    def display(self) -> None:
        """Show the live dashboard and, beside it, its static copy (hidden while the live one is drawn)."""
        from IPython.display import display

        display(self.widget)
        self.copy.display(self.static_html())

    def _update_fallback(self) -> None:
        self.copy.update(self.static_html())

    def _procs(self) -> dict[int, dict[str, Any]]:
        if self.run is not None:
            return {pid: dict(d) for pid, d in list(self.run.snapshot.procs.items())}
        return self._record_procs

    def _status_html(self, snap: dict[str, Any], summary: dict[str, Any] | None) -> str:
        run = self.run
        if summary is not None:
            state, elapsed = summary["exit"]["cause"], summary.get("duration_s") or 0.0
            peak = (summary.get("peak") or {}).get("tree_pss_bytes") or (summary.get("peak") or {}).get(
                "tree_rss_bytes"
            )
            cur = None
            limit = summary.get("limit")
            leak, spikes = summary.get("leak") or {}, summary.get("spikes") or []
            note = None
        else:
            assert run is not None
            s = run.snapshot
            state, elapsed = ("stopping" if self._stopping else "running"), run.elapsed()
            cur, peak = s.tree_pss if s.tree_pss is not None else s.tree_rss, s.peak_pss or s.peak_rss
            limit = run.limit()
            leak = self.leak.update(run)
            spikes = self.leak.spikes
            note = run.stack_taker.note  # an automatic capture (near the limit, a stall): said where the eye is
        color = CAUSE_COLOR.get(state, "#c62828")
        lim = limit["bytes"] if limit else None
        head = f"{fmt_bytes(lim - cur)} headroom to the {limit_text(limit)}" if lim and cur else limit_text(limit)
        now = f"now {fmt_bytes(cur)} · " if cur is not None else ""
        return (
            f"<div class='memscope-status' style='font-family:monospace;font-size:13px'>"
            f"<b style='color:{color}'>● {esc(state)}</b> {fmt_elapsed(elapsed)} · {now}"
            f"peak {fmt_bytes(peak)} · {esc(head)} · {esc(leak_line(leak, spikes))}"
            + (f" · {esc(note)}" if note else "")
            + "</div>"
        )

    # -- lifecycle -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop updating and close this dashboard's own widgets, threads and subscriptions (the run goes on).

        Only what this dashboard made: ipywidgets 8's ``close_all`` is a class method that would close every widget
        of the kernel (a slider in another cell, another run's dashboard), and the BokehJS carrier is shared.
        """
        self._closed.set()
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=10)  # it ends within one push; then it has released its subscriptions
        self._release()
        for widget in self._own_widgets():
            try:
                widget.close()
            except Exception:
                pass

    def _own_widgets(self) -> list[w.Widget]:
        """Every widget this dashboard made: its box and, depth first, the boxes' children (never the shared
        BokehJS carrier, which is a trait of the charts, not a child)."""
        out: list[w.Widget] = []
        todo: list[Any] = [self.widget]
        while todo:
            x = todo.pop()
            if isinstance(x, w.Widget) and x not in out:
                out.append(x)
                todo.extend(getattr(x, "children", ()) or ())
        return out

    def _ipython_display_(self) -> None:
        self.display()


def _recorded_phases(path: str) -> list[dict[str, Any]]:
    """The phase and epoch events the record already holds when a dashboard starts following a run (empty if the
    record cannot be read yet)."""
    from ..record.reader import RunData

    try:
        rd = RunData(path)
        try:
            return [
                {"t": e["t"], "pid": e["pid"], "kind": kind, "data": e["data"]}
                for kind in ("phase", "epoch")
                for e in rd.events(kind)
            ]
        finally:
            rd.close()
    except Exception:
        return []


def show(run: "Run", others: "Sequence[Run]" = ()) -> Dashboard:
    """Display the dashboard of ``run`` in the current cell, replacing one this cell made before; ``others``, the
    runs of this kernel still going besides it, are listed with a Stop each."""
    d = _dashboard_in_cell(run, others)
    d.display()
    return d


def _dashboard_in_cell(run: "Run", others: "Sequence[Run]" = ()) -> Dashboard:
    """A new dashboard following ``run``, for the current cell: the one this cell made before is closed."""
    cell = _cell_id()
    old = _by_cell.pop(cell, None) if cell else None
    if old is not None:
        old.close()
    d = Dashboard(run, title=" ".join(redact_argv(run.command))[-120:], others=others)
    d.request = cell_request()[1]
    if cell:
        _by_cell[cell] = d
    global last
    last = d
    return d


def view_bundle(run: "Run") -> dict[str, Any] | None:
    """A Run displayed in a notebook (``run`` as a cell's last line): a new live dashboard as a mime bundle (a widget
    view, which ipywidgets 7 and 8 both render; its text is the run's repr). None (the repr) when this very cell
    execution has just shown its dashboard: ``%memscope train.py`` as a cell's last line returns the run it shows."""
    if last is not None and last.run is run and last.request is not None and last.request == cell_request()[1]:
        return None
    d = _dashboard_in_cell(run)
    return {
        "text/plain": repr(run),
        "application/vnd.jupyter.widget-view+json": {
            "version_major": 2,
            "version_minor": 0,
            "model_id": d.widget.model_id,
        },
    }


def _cell_id() -> str | None:
    return cell_request()[0]


def cell_request() -> tuple[str | None, str | None]:
    """The executing cell's id, from the execute_request's ``metadata.cellId`` (None where the frontend sends
    none), and that request's msg_id (a re-run of the cell is a new request)."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
        parent = ip.kernel.get_parent() if hasattr(ip.kernel, "get_parent") else ip.parent_header
        md = parent.get("metadata") or {}
        return md.get("cellId") or md.get("cell_id"), (parent.get("header") or {}).get("msg_id")
    except Exception:
        return None, None


def reopen(ref: str, record_dir: str | None = None) -> Dashboard:
    """The dashboard of a run, from its record: id, unique prefix, 'last', or path. A run this kernel started and
    is still going is followed live; one still going in another process says "running", not "unknown"."""
    from ..analysis.summary import summarize
    from ..record.catalogue import default_record_dir, find_run
    from ..record.reader import RunData

    path = find_run(record_dir or default_record_dir(), ref)
    live = started_here(path)
    if live is not None and not live.ended:
        return show(live)
    rd = RunData(path)
    try:
        row = rd.run_row()
        # the summary is a plain dict here: its exit is rewritten below for a run going elsewhere
        summary = cast("dict[str, Any]", row["summary"] or summarize(rd))
        procs = record_procs(rd)
        rows = rd.processes()
    finally:
        rd.close()
    # A record without its end (no summary, no exit) whose root process is still there: a run going elsewhere.
    root_created = _created(row["root_pid"])
    if (
        not row["summary"]
        and summary["exit"]["cause"] == "unknown"
        and root_created is not None
        and row["t0_epoch"] is not None
        and root_created <= row["t0_epoch"] + 1.0  # the run's own root, not a later process given its pid
    ):
        summary["exit"] = dict(
            summary["exit"],
            cause="running",
            message=f"The run is still going (its process {row['root_pid']} is alive): this is its record so far. "
            "memscope.reopen() in the kernel that started it follows it live.",
        )
        for p in rows:  # the processes with no recorded end that are still there (the same start time)
            created = _created(p["pid"])
            if p["exit_t"] is None and created is not None and abs(created - (p["create_time"] or created)) < 1.0:
                procs.setdefault(p["pid"], {})["alive"] = True
    d = Dashboard(
        series=RunSeries.from_record(path),
        summary=summary,
        procs=procs,
        title=" ".join(redact_argv(row["command"]))[-120:],
        gpu=GpuSeries.from_record(path),
    )
    d.display()
    return d


def _created(pid: int | None) -> float | None:
    """When process ``pid`` started (epoch seconds), None when there is none (or only its zombie)."""
    if not pid:
        return None
    try:
        p = psutil.Process(int(pid))
        return None if p.status() == psutil.STATUS_ZOMBIE else p.create_time()
    except (psutil.Error, ValueError):
        return None
