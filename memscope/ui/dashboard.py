"""The notebook dashboard of one run: status line, memory chart, process table, output tail, buttons, and the
verdict card when the run ends.

It owns no data: it subscribes to the run's records (or reads a finished run's record) through RunSeries,
and pushes at most 4 updates a second to the browser. One updater thread per dashboard, which ends with the run
or when the dashboard is closed (re-running a cell closes the dashboard it made before).
"""

from __future__ import annotations

import html
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import ipywidgets as w

from ..analysis import phases as phases_mod
from ..analysis.leak import find_spikes, fit_plan
from ..fmt import fmt_bytes, fmt_elapsed
from .chart import MemoryChart, count_points
from .controls import Controls
from .gpu_chart import GpuSeries
from .probes import ProbesFeed
from .series import RunSeries
from .terminal import limit_text, verdict_text

if TYPE_CHECKING:
    from ..session.run import Run

PUSH_PERIOD_S = 0.25  # at most 4 updates a second reach the browser
# Each push sends the whole (decimated) window: on a long run that is ~15,000 points and ~300 KiB. The browser
# redraws it all each time, so a big window is pushed less often: one second more per 8,000 points, 2 s at most.
POINTS_PER_S = 8000
MAX_PUSH_PERIOD_S = 2.0
LEAK_PERIOD_S = 5.0  # the live leak verdict is recomputed this often
SCALENE_SECONDS = 10.0  # what the "Scalene snapshot" button profiles
_by_cell: dict[str, "Dashboard"] = {}
last: "Dashboard | None" = None  # the most recent dashboard shown (for tests and for the curious)
_CAUSE_COLOR = {"ok": "#2e7d32", "stopped_by_user": "#555", "exit_nonzero": "#b26a00", "running": "#1565c0"}


def push_period(points: int) -> float:
    """Seconds until the next push, after one that carried ``points`` chart points."""
    return min(MAX_PUSH_PERIOD_S, max(PUSH_PERIOD_S, points / POINTS_PER_S))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith("s") else f"{n} {word}s"


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


TABLE_COLUMNS = ("pid", "role", "RSS", "private", "PSS", "swap", "peak RSS", "peak PSS", "state", "command")


def process_table(procs: dict[int, dict[str, Any]]) -> str:
    """One row per process. RSS, private and PSS of a row are of one moment (the row's last round: PSS measured
    then, or carried to it from the last PSS reading, whose age the cell's tooltip gives); peaks have their own
    columns. The live view and a reopened run use the same columns."""
    # A "GPU" column only when some process has GPU memory (``gpu`` bytes: NVML's, else PyTorch's reserved).
    gpu = any(d.get("gpu") for d in procs.values())
    rows = []
    for pid, d in sorted(procs.items(), key=lambda x: (not x[1].get("alive", True), -(x[1].get("rss") or 0))):
        alive = d.get("alive", True)
        if alive:
            state = "running"
        elif d.get("exit_signal"):
            state = f"died: {d['exit_signal']}"
        elif d.get("exit_code") is not None:
            state = f"exited {d['exit_code']}"
        else:
            state = "exited"
        style = "" if alive else ' style="color:#999"'
        t, pss_t = d.get("t"), d.get("pss_t")
        age = (
            f"measured {t - pss_t:.1f} s before this row's round, carried forward by the change of private memory"
            if t is not None and pss_t is not None and t > pss_t
            else "measured in this round"
        )
        cmd = _esc(d.get("cmdline") or d.get("name") or "")
        rows.append(
            f"<tr{style}><td>{pid}</td><td>{_esc(d.get('role', 'other'))}</td>"
            f"<td>{fmt_bytes(d.get('rss'))}</td><td>{fmt_bytes(d.get('private'))}</td>"
            f"<td title='{_esc(age)}'>{fmt_bytes(d.get('pss'))}</td>"
            f"<td>{fmt_bytes(d.get('swap'))}</td>"
            + (f"<td>{fmt_bytes(d.get('gpu')) if d.get('gpu') else ''}</td>" if gpu else "")
            + f"<td>{fmt_bytes(d.get('peak_rss'))}</td>"
            f"<td>{fmt_bytes(d.get('peak_pss'))}</td><td>{_esc(state)}</td>"
            f"<td class='memscope-cmd' title='{cmd}' style='{_CMD_STYLE}'>{cmd}</td></tr>"
        )
    columns = TABLE_COLUMNS[:6] + (("GPU",) if gpu else ()) + TABLE_COLUMNS[6:]
    head = "".join(f"<th style='text-align:left;padding-right:10px'>{h}</th>" for h in columns)
    return (
        f"<table class='memscope-procs' style='font-size:12px;font-family:monospace;width:100%;"
        f"white-space:nowrap'><tr>{head}</tr>"
        f"{''.join(rows)}</table><div style='font-size:11px;color:#666'>RSS, private (anonymous resident) "
        "and PSS are of one moment; PSS is read every few seconds and carried to each round by the change "
        "of private memory (hover a PSS cell for its age).</div>"
    )


# The command takes what the other columns leave (max-width:0 lets a cell shrink below its text) and ends in an
# ellipsis; the full command is its tooltip. A narrow notebook (a side panel open) then clips nothing.
_CMD_STYLE = "max-width:0;width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap"


def with_gpu(procs: dict[int, dict[str, Any]], gpu_by_pid: dict[int, int]) -> dict[int, dict[str, Any]]:
    """``procs`` with each process's GPU bytes (``gpu``) where it has some."""
    for pid, b in gpu_by_pid.items():
        if pid in procs and b:
            procs[pid] = dict(procs[pid], gpu=b)
    return procs


def output_tail(lines: list[str], partial: str = "") -> str:
    text = "\n".join(lines[-200:] + ([partial] if partial else []))
    return (
        f"<pre class='memscope-output' style='max-height:220px;overflow:auto;font-size:11px;white-space:pre-wrap;"
        f"overflow-wrap:anywhere;background:#f8f8f8;padding:4px;margin:0'>{_esc(text)}</pre>"
    )


def verdict_card(summary: dict[str, Any]) -> str:
    ex = summary["exit"]
    color = _CAUSE_COLOR.get(ex["cause"], "#c62828")
    peak = summary.get("peak") or {}
    leak = summary.get("leak") or {}
    tb = ex.get("traceback")
    tb_html = (
        f"<details><summary>stack</summary><pre style='font-size:11px'>{_esc(tb[-6000:])}</pre></details>" if tb else ""
    )
    leak_html = f"<div>memory: {_esc(leak_line(leak))}</div>" if leak else ""
    advice = summary.get("advice") or []
    if advice:
        items = "".join(f"<li>{_esc(a['text'])}</li>" for a in advice[:6])
        leak_html += f"<div style='margin-top:4px'>what to do next:<ul style='margin:2px 0'>{items}</ul></div>"
    leak_html += snapshot_link(summary)
    return (
        f"<div class='memscope-verdict' style='border-left:6px solid {color};padding:6px 10px;margin:6px 0;"
        f"background:#fafafa;overflow-wrap:anywhere'>"
        f"<div style='font-weight:bold;color:{color}'>{_esc(ex['cause'])}</div>"
        f"<div>{_esc(ex['message'])}</div>"
        f"<div>peak tree PSS {fmt_bytes(peak.get('tree_pss_bytes'))}, RSS {fmt_bytes(peak.get('tree_rss_bytes'))}"
        f" at {peak.get('at_s', 0):.1f} s; {_plural(len(summary.get('processes', [])), 'process')}</div>{leak_html}"
        f"<div style='font-size:11px;color:#666'>record: {_esc(summary.get('record', ''))} "
        f"(memscope.reopen('{_esc(summary.get('run_id', ''))}'))</div>{tb_html}</div>"
    )


def snapshot_link(summary: dict[str, Any]) -> str:
    """The CUDA memory snapshot saved at an OOM, and how to open it (a notebook cannot follow a file:// link)."""
    import shlex

    path = (summary.get("cuda_oom") or {}).get("snapshot") or next(
        (o["snapshot"] for o in (summary.get("allocator") or {}).get("ooms") or [] if o.get("snapshot")), None
    )
    if not path:
        return ""
    return (
        f"<div class='memscope-snapshot-link' style='margin-top:4px'>CUDA memory snapshot at the OOM: "
        f"<a href='{_esc(path)}' download><code>{_esc(path)}</code></a>; open it with "
        f"<code>memscope.open_snapshot({_esc(repr(path))})</code> or "
        f"<code>memscope snapshot {_esc(shlex.quote(path))} --html snapshot.html</code></div>"
    )


def leak_line(leak: dict[str, Any], spikes: list[dict[str, Any]] | None = None) -> str:
    return verdict_text(leak, spikes)


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
    ) -> None:
        self.run = run
        self.gpu = gpu or GpuSeries()  # before the subscription below feeds it
        self._gpu_version = -1
        self._record_procs = procs or {}
        self._phase_events: list[dict[str, Any]] = []
        self._phase_keys: set[tuple[float, int | None, str]] = set()  # the record and the subscription overlap
        self._unsubscribe_phases: Callable[[], None] | None = None
        self._release_lock = threading.Lock()
        self._released = False
        self._thread: threading.Thread | None = None
        if series is None and run is not None:
            # Phases: this view's own subscription, seeded from what the record already holds.
            self._unsubscribe_phases = run.subscribe(self._on_record)
            series = RunSeries.follow(run)  # the history so far, roles included, then every new record
            for e in _recorded_phases(run.record_path):
                self._add_phase_event(e)
            self.gpu.load(run.record_path)
        self.series = series or RunSeries()
        self._closed = threading.Event()
        self._leak: dict[str, Any] = {}
        self._spikes: list[dict[str, Any]] = []
        self._leak_at = 0.0
        self.status = w.HTML()
        self.chart = MemoryChart(title=title, height=300)
        self.gpu_chart: MemoryChart | None = None  # made with the run's first GPU data, never before
        self.table = w.HTML()
        self.output = w.HTML()
        self.card = w.HTML()
        self.notes = w.HTML()  # memscope's own lines about the run (warnings), here and not in another cell
        self._notes: list[str] = []
        self.census = w.HTML()
        self.probes = w.HTML()  # NumPy loads, FAISS indexes, glibc heap
        self._probe_feed = ProbesFeed(run)
        self.scalene = w.HTML()  # Scalene snapshots, newest first
        self._scalene_snaps: list[dict[str, Any]] = []
        self.controls = Controls(self._action) if run is not None else None
        self._working: set[str] = set()  # buttons whose slow work (census, Scalene window) is under way
        parts: list[w.Widget] = [self.status, self.notes, self.card]
        if self.controls is not None:
            parts.append(self.controls)
        parts.append(self.census)
        parts += [self.chart, w.Accordion(children=[self.table, self.output, self.scalene, self.probes])]
        self.widget = w.VBox(parts)
        acc = parts[-1]
        for i, name in enumerate(("Processes", "Output (last 200 lines)", "Scalene snapshots", "Loads and indexes")):
            try:
                acc.set_title(i, name)
            except Exception:
                pass
        acc.selected_index = 0
        if run is not None:
            self._thread = threading.Thread(target=self._loop, name="memscope-dashboard", daemon=True)
            self._thread.start()
        else:
            self._push(final_summary=summary)

    # -- data in ---------------------------------------------------------------------------------------------
    def _on_record(self, rec: Any) -> None:
        name = type(rec).__name__
        if name == "Event" and rec.kind in ("phase", "epoch"):  # epochs: where the training starts
            self._add_phase_event({"t": rec.t, "pid": rec.pid, "kind": rec.kind, "data": rec.data})
        self.gpu.add(rec)

    def _add_phase_event(self, e: dict[str, Any]) -> None:
        key = (round(e["t"], 6), e["pid"], e["kind"])
        if key not in self._phase_keys:
            self._phase_keys.add(key)
            self._phase_events.append(e)

    def note(self, line: str) -> None:
        """Show one of memscope's own lines about the run (a warning) under the status line (the last ten)."""
        self._notes.append(line)
        self.notes.value = "".join(f"<div style='color:#a15c00'>{_esc(x)}</div>" for x in self._notes[-10:])

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
                    points = self._push(final_summary=run.wait(5) if ended else None)
                    period = push_period(points)
                except Exception:
                    pass
            if ended:
                break
            self._closed.wait(period)
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
        if final_summary and final_summary.get("phases") is not None:
            snap["phases"] = [
                {"name": p["name"], "start_s": p["start_s"], "end_s": p["end_s"]} for p in final_summary["phases"]
            ]
        else:
            main, events = self._main_events()
            snap["phases"] = [
                {"name": n, "start_s": a, "end_s": b} for n, a, b in phases_mod.intervals(events, end, main)
            ]
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
        self.table.value = process_table(with_gpu(self._procs(), self.gpu.per_pid(peak=final_summary is not None)))
        self.probes.value = self._probe_feed.html(final_summary)
        if self.run is not None:
            self.output.value = output_tail(list(self.run.output_tail), self.run.output_partial)
        self.status.value = self._status_html(snap, final_summary)
        if final_summary is not None:
            self.card.value = verdict_card(final_summary)
            if final_summary.get("census") and not self.census.value:  # a reopened run: its last census
                from .census import census_html

                self.census.value = census_html(final_summary["census"][-1])
            if final_summary.get("scalene") and not self._scalene_snaps:  # a reopened run
                from .scalene import snapshots_html

                self.scalene.value = snapshots_html(final_summary["scalene"])
            if self.controls is not None:  # what the buttons said about the run no longer applies
                self.controls.disabled = ["stop", "kill", "scalene", "census"]
                self.controls.labels = {}
                if not self._working:
                    self.controls.note = ""
        return count_points(snap)

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
        else:
            assert run is not None
            s = run.snapshot
            state, elapsed = "running", run.elapsed()
            cur, peak = s.tree_pss if s.tree_pss is not None else s.tree_rss, s.peak_pss or s.peak_rss
            limit = run.limit()
            leak = self._live_leak(snap, limit["bytes"] if limit else None)
            spikes = self._spikes
        color = _CAUSE_COLOR.get(state, "#c62828")
        lim = limit["bytes"] if limit else None
        head = f"{fmt_bytes(lim - cur)} headroom to the {limit_text(limit)}" if lim and cur else limit_text(limit)
        now = f"now {fmt_bytes(cur)} · " if cur is not None else ""
        return (
            f"<div class='memscope-status' style='font-family:monospace;font-size:13px'>"
            f"<b style='color:{color}'>● {_esc(state)}</b> {fmt_elapsed(elapsed)} · {now}"
            f"peak {fmt_bytes(peak)} · {_esc(head)} · {_esc(leak_line(leak, spikes))}</div>"
        )

    def _main_events(self) -> tuple[int | None, list[dict[str, Any]]]:
        """The main process's pid, and the phase and epoch events in time order."""
        main = next((pid for pid, d in self._procs().items() if d.get("role") == "main"), None)
        return main, sorted(self._phase_events, key=lambda e: e["t"])

    def _live_leak(self, snap: dict[str, Any], limit: int | None) -> dict[str, Any]:
        """The leak verdict as the summary will give it: fitted on the tree's private memory (anonymous PSS +
        swap) at every RSS round, recomputed every LEAK_PERIOD_S."""
        now = time.monotonic()
        if now - self._leak_at >= LEAK_PERIOD_S:
            self._leak_at = now
            with self.series._lock:
                t, y = self.series.tree_private.points()
            if len(t) < 3:  # a record without the fast series: the tree's RSS
                total = snap.get("tree_rss") or {}
                t, y = total.get("t") or [], total.get("y") or []
            elif limit and self.run is not None and self.run.snapshot.tree_pss:
                limit = max(1, limit - max(0, self.run.snapshot.tree_pss - y[-1]))  # file-backed pages count too
            if t:
                main, events = self._main_events()
                self._leak = fit_plan(events, t[-1], main).verdict(t, y, limit).to_dict()
            with self.series._lock:
                tt, ty = self.series.pss_by_role.total()
            self._spikes = [sp.to_dict() for sp in find_spikes(tt, ty)] if len(tt) >= 3 else []
        return self._leak

    # -- buttons ---------------------------------------------------------------------------------------------
    def _action(self, action: str) -> str:
        run = self.run
        assert run is not None and self.controls is not None
        if run.ended:
            return "the run has ended"
        if action == "stop":
            run.stop(wait=False)
            self.controls.labels = {"stop": "stopping…"}
            return (
                f"SIGINT sent, as Ctrl-C; if the run is still there {run.options.grace_s:g} s later, SIGTERM, "
                f"then SIGKILL"
            )
        if action == "kill":
            run.kill(wait=False)
            self.controls.labels = {"kill": "killing…"}
            return "SIGKILL sent to every process of the run"
        if action in self._working:
            return f"the {'census' if action == 'census' else 'Scalene snapshot'} asked for before is still running"
        if action == "scalene":
            if run.scalene is None:
                from ..session.scalene import HOW_TO

                return f"this run is not under Scalene: {HOW_TO}"
            self.controls.labels = {"scalene": "profiling…"}
            self._in_background("scalene", "Scalene snapshot", self._take_scalene)
            return f"profiling {SCALENE_SECONDS:g} s with Scalene…"
        if action == "census":
            self.controls.labels = {"census": "counting…"}
            self._in_background("census", "Tensor census", self._take_census)
            return "counting the main process's tensors…"
        return f"unknown action {action}"

    def _in_background(self, action: str, label: str, work: Callable[[], str]) -> None:
        """Run a button's slow work (a census, a Scalene window) off the kernel's message thread; its outcome
        becomes the controls' note, and the button gets its label back."""
        from ..errors import CensusError, ScaleneError

        assert self.controls is not None

        def go() -> None:
            try:
                note = work()
            except (CensusError, ScaleneError) as exc:
                note = f"no {label.lower()}: {exc}"
            except Exception as exc:  # never let a button break the dashboard
                note = f"{label} failed: {exc!r}"
            finally:
                self._working.discard(action)
            self.controls.labels = {action: label}
            self.controls.note = note

        self._working.add(action)
        threading.Thread(target=go, name=f"memscope-{action}", daemon=True).start()

    def _take_census(self) -> str:
        from .census import census_html

        assert self.run is not None
        c = self.run.census()
        self.census.value = census_html(c.to_dict())
        return f"census taken in {c.duration_s:.2f} s" + (
            "" if c.diff.get("since") is not None else "; take another later to see what grows"
        )

    def _take_scalene(self) -> str:
        from .scalene import snapshots_html

        assert self.run is not None
        snap = self.run.scalene_snapshot(SCALENE_SECONDS)
        self._scalene_snaps.append(snap.to_dict())
        self.scalene.value = snapshots_html(self._scalene_snaps)
        top = snap.top[0] if snap.top else None
        return (
            (
                f"Scalene snapshot #{snap.index}: hottest line {top['file'].rsplit('/', 1)[-1]}:{top['line']} "
                f"({top['cpu_percent']:.0f}% CPU); see “Scalene snapshots” below"
            )
            if top
            else f"Scalene snapshot #{snap.index}: no line of the script was busy"
        )

    # -- lifecycle -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop updating and close this dashboard's own widgets, threads and subscriptions (the run goes on).

        Only what this dashboard made: ipywidgets 8's ``close_all`` is a class method that would close every widget
        of the kernel (a slider in another cell, another run's dashboard), and the BokehJS carrier is shared.
        """
        self._closed.set()
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
        from IPython.display import display

        display(self.widget)


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


def show(run: "Run") -> Dashboard:
    """Display the dashboard of ``run`` in the current cell, replacing one this cell made before."""
    from IPython.display import display

    cell = _cell_id()
    old = _by_cell.pop(cell, None) if cell else None
    if old is not None:
        old.close()
    d = Dashboard(run, title=" ".join(run.command)[-120:])
    if cell:
        _by_cell[cell] = d
    global last
    last = d
    display(d.widget)
    return d


def _cell_id() -> str | None:
    try:
        from IPython import get_ipython

        ip = get_ipython()
        parent = ip.kernel.get_parent() if hasattr(ip.kernel, "get_parent") else ip.parent_header
        md = parent.get("metadata") or {}
        return md.get("cellId") or md.get("cell_id")
    except Exception:
        return None


def record_procs(rd: Any) -> dict[int, dict[str, Any]]:
    """The process table's rows of a recorded run (a ``store.RunData``): each process's last round and its
    peaks, in the live table's columns."""
    procs = {
        p["pid"]: {
            "role": p["role"],
            "cmdline": p["cmdline"],
            "alive": False,
            "exit_code": p["exit_code"],
            "exit_signal": p["exit_signal"],
        }
        for p in rd.processes()
    }
    for pid, last in rd.last_by_pid().items():
        procs.setdefault(pid, {"alive": False}).update(last)
    for pid, (rss, pss) in rd.peaks_by_pid().items():
        procs.setdefault(pid, {"alive": False}).update(peak_rss=rss, peak_pss=pss)
    return procs


def reopen(ref: str, record_dir: str | None = None) -> Dashboard:
    """The dashboard of a finished run, from its record: id, unique prefix, 'last', or path."""
    from IPython.display import display

    from ..analysis.summary import summarize
    from ..record.catalogue import default_record_dir, find_run
    from ..record.reader import RunData

    path = find_run(record_dir or default_record_dir(), ref)
    rd = RunData(path)
    try:
        row = rd.run_row()
        summary = row["summary"] or summarize(rd)
        procs = record_procs(rd)
    finally:
        rd.close()
    d = Dashboard(
        series=RunSeries.from_record(path),
        summary=summary,
        procs=procs,
        title=" ".join(row["command"])[-120:],
        gpu=GpuSeries.from_record(path),
    )
    display(d.widget)
    return d
