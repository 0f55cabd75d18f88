"""The dashboard's buttons: stop, kill, a Scalene snapshot, a tensor census, every process's stacks.

Slow work (a census, a Scalene window, the stacks) runs off the kernel's message thread; its outcome becomes the
controls' note, and the button gets its label back. The panels it fills are the dashboard's, handed in.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

import ipywidgets as w

from ..errors import SCALENE_HOW_TO, CensusError, ScaleneError, StacksError
from .controls import Controls
from .dashboard_panels import ScalenePanel

if TYPE_CHECKING:
    from ..session.run import Run

SCALENE_SECONDS = 10.0  # what the "Scalene snapshot" button profiles


class Buttons:
    """The controls of a live run, and what each button does to it."""

    def __init__(self, run: "Run", census: w.HTML, stacks: w.HTML, scalene: ScalenePanel) -> None:
        self.run = run
        self.census = census
        self.stacks = stacks
        self.scalene = scalene
        self.controls = Controls(self.action)
        self.working: set[str] = set()  # buttons whose slow work (census, Scalene window) is under way

    def ended(self) -> None:
        """The run has ended: what the buttons said about it no longer applies."""
        self.controls.disabled = ["stop", "kill", "scalene", "census", "stacks"]
        self.controls.labels = {}
        if not self.working:
            self.controls.note = ""

    def action(self, action: str) -> str:
        """Do what the button ``action`` asks; returns the line the controls show."""
        run = self.run
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
        if action in self.working:
            what = {"census": "census", "stacks": "stacks"}.get(action, "Scalene snapshot")
            return f"the {what} asked for before {'are' if action == 'stacks' else 'is'} still running"
        if action == "scalene":
            if run.scalene is None:
                return f"this run is not under Scalene: {SCALENE_HOW_TO}"
            self.controls.labels = {"scalene": "profiling…"}
            self._in_background("scalene", "Scalene snapshot", self._take_scalene)
            return f"profiling {SCALENE_SECONDS:g} s with Scalene…"
        if action == "census":
            self.controls.labels = {"census": "counting…"}
            self._in_background("census", "Tensor census", self._take_census)
            return "counting the main process's tensors…"
        if action == "stacks":
            self.controls.labels = {"stacks": "taking…"}
            self._in_background("stacks", "Stacks", self._take_stacks)
            return "taking every process's stacks…"
        return f"unknown action {action}"

    def _in_background(self, action: str, label: str, work: Callable[[], str]) -> None:
        """Run a button's slow work off the kernel's message thread."""

        def go() -> None:
            try:
                note = work()
            except (CensusError, ScaleneError, StacksError) as exc:
                note = f"no {label.lower()}: {exc}"
            except Exception as exc:  # never let a button break the dashboard
                note = f"{label} failed: {exc!r}"
            finally:
                self.working.discard(action)
            self.controls.labels = {action: label}
            self.controls.note = note

        self.working.add(action)
        threading.Thread(target=go, name=f"memscope-{action}", daemon=True).start()

    def _take_census(self) -> str:
        from .census import census_html

        c = self.run.census()
        self.census.value = census_html(c.to_dict())
        return f"census taken in {c.duration_s:.2f} s" + (
            "" if c.diff.get("since") is not None else "; take another later to see what grows"
        )

    def _take_stacks(self) -> str:
        s = self.run.stacks()
        self.stacks.value = s._repr_html_()
        return f"stacks taken in {s.data.get('duration_s', 0) * 1000:.0f} ms: {len(s.processes)} processes"

    def _take_scalene(self) -> str:
        snap = self.run.scalene_snapshot(SCALENE_SECONDS)
        self.scalene.add(snap.to_dict())
        top = snap.top[0] if snap.top else None
        return (
            (
                f"Scalene snapshot #{snap.index}: hottest line {top['file'].rsplit('/', 1)[-1]}:{top['line']} "
                f"({top['cpu_percent']:.0f}% CPU); see “Scalene snapshots” below"
            )
            if top
            else f"Scalene snapshot #{snap.index}: no line of the script was busy"
        )
