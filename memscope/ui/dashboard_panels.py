"""The dashboard's panels that keep state of their own: notes, the chart's phases and marks, the live leak verdict,
the Scalene snapshots, and the static copy a saved notebook shows.

Each owns its widget (where it has one) and the data behind it; ``dashboard.Dashboard`` lays them out and feeds them.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from ..analysis import copy_on_read as cor_mod
from ..analysis import phases as phases_mod
from .fragments import esc, stack_marks
from .static_view import static_html

if TYPE_CHECKING:
    from ..session.run import Run

LEAK_PERIOD_S = 5.0  # the live leak verdict is recomputed this often
NOTES_SHOWN = 10  # memscope's lines about the run kept on screen (the latest)


class Notes:
    """memscope's own lines about the run (warnings), under the status line: here and not in another cell."""

    def __init__(self) -> None:
        self.widget = w.HTML()
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        """Show one line more (the last ``NOTES_SHOWN``)."""
        self.lines.append(line)
        self.widget.value = "".join(f"<div style='color:#a15c00'>{esc(x)}</div>" for x in self.lines[-NOTES_SHOWN:])


class PhaseMarks:
    """The phase and epoch events and the stacks captures of a live run: the chart's bands and marks."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.stacks: list[dict[str, Any]] = []  # the stacks captures seen live (time, reason)
        self._keys: set[tuple[float, int | None, str]] = set()  # the record and the subscription overlap

    def add_event(self, e: dict[str, Any]) -> None:
        """One phase or epoch event (``t``, ``pid``, ``kind``, ``data``), once however often it is seen."""
        key = (round(e["t"], 6), e["pid"], e["kind"])
        if key not in self._keys:
            self._keys.add(key)
            self.events.append(e)

    def add_stacks(self, t: float, reason: Any) -> None:
        """A stacks capture at ``t``: a mark on the chart."""
        self.stacks.append({"t_s": t, "reason": reason})

    def main_events(self, procs: dict[int, dict[str, Any]]) -> tuple[int | None, list[dict[str, Any]]]:
        """The main process's pid, and the phase and epoch events in time order."""
        main = next((pid for pid, d in procs.items() if d.get("role") == "main"), None)
        return main, sorted(self.events, key=lambda e: e["t"])

    def phases(
        self, summary: dict[str, Any] | None, end: float, procs: dict[int, dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The chart's phase bands: the summary's at the end, else those of the events so far."""
        if summary and summary.get("phases") is not None:
            return [{"name": p["name"], "start_s": p["start_s"], "end_s": p["end_s"]} for p in summary["phases"]]
        main, events = self.main_events(procs)
        # The open phase without an end (the chart draws it to the last point): its end moved at every push,
        # and the chart's phases, unchanged, are not sent again.
        return [
            {"name": n, "start_s": a, "end_s": b if b < end else None}
            for n, a, b in phases_mod.intervals(events, end, main)
        ]

    def marks(self, summary: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The chart's stacks marks: the summary's at the end, else the captures seen live."""
        return stack_marks((summary or {}).get("stacks") or self.stacks)


class LiveLeak:
    """The leak verdict while the run goes: the run's one live verdict (``Run.verdict()``, session/verdict.py),
    the same the terminal footer and the Prometheus exporter show, held against flip-flops. Its words name the
    kind of growth and the spikes; ``spikes`` stays empty (the verdict says them)."""

    def __init__(self) -> None:
        self.leak: dict[str, Any] = {}
        self.spikes: list[dict[str, Any]] = []

    def update(self, run: "Run") -> dict[str, Any]:
        """The run's live verdict now (refitted by the run when due)."""
        self.leak = run.verdict()
        return self.leak


class ScalenePanel:
    """Scalene snapshots, newest first: those taken from this dashboard, or a reopened run's recorded ones."""

    def __init__(self) -> None:
        self.widget = w.HTML()
        self.snaps: list[dict[str, Any]] = []

    def add(self, snap: dict[str, Any]) -> None:
        """A snapshot just taken."""
        from .scalene import snapshots_html

        self.snaps.append(snap)
        self.widget.value = snapshots_html(self.snaps)

    def show_recorded(self, snaps: list[dict[str, Any]]) -> None:
        """A finished run's snapshots, unless this dashboard took its own."""
        if snaps and not self.snaps:
            from .scalene import snapshots_html

            self.widget.value = snapshots_html(snaps)


class StaticCopy:
    """The dashboard as static HTML beside the live one: what a saved notebook shows without its kernel (hidden
    while the live one is drawn, through the CSS class ``memscope-live-<key>``)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.snap: dict[str, Any] = {}  # the chart's data at the last push
        self._handle: Any = None  # the display handle, once displayed
        self.at = 0.0  # time.monotonic() of the last update

    def html(self, status: str, card: str, table: str) -> str:
        """The copy as it is now."""
        return static_html(self.key, status, card, table, self.snap)

    def display(self, html: str) -> None:
        """Display the copy (not on Colab: each output has its own frame there, so the CSS cannot hide it)."""
        from IPython.display import display

        if "google.colab" in sys.modules:
            return
        self.at = time.monotonic()
        self._handle = display({"text/html": html, "text/plain": ""}, raw=True, display_id=True)

    def update(self, html: str) -> None:
        """Replace the displayed copy by ``html``."""
        self.at = time.monotonic()
        if self._handle is not None:
            try:
                self._handle.update({"text/html": html, "text/plain": ""}, raw=True)
            except Exception:  # never let the copy break the dashboard
                pass


class LiveCopyOnRead:
    """Copy-on-read on the record so far (analysis/copy_on_read.assess), every LEAK_PERIOD_S while DataLoader
    workers are alive; once found, kept (their copies stay) and brought up to date (its bound, levelled off)."""

    def __init__(self) -> None:
        self.found: dict[str, Any] | None = None
        self._at = 0.0

    def update(self, run: Run | None, procs: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
        """The latest finding (None before any)."""
        now = time.monotonic()
        if run is None or now - self._at < LEAK_PERIOD_S:
            return self.found
        self._at = now
        if not any(d.get("role") == cor_mod.WORKER_ROLE and d.get("alive", True) for d in procs.values()):
            return self.found
        from ..record.reader import RunData

        try:
            rd = RunData(run.record_path)
            try:
                found = dict(cor_mod.assess(rd).to_dict())
                if found["detected"] or not (self.found or {}).get("detected"):
                    self.found = found
            finally:
                rd.close()
        except Exception:  # a record being written can be read half-way: the next period tries again
            pass
        return self.found
