"""The dashboard's panels that keep state of their own: notes, the chart's phases and marks, the live leak verdict,
the Scalene snapshots, and the static copy a saved notebook shows.

Each owns its widget (where it has one) and the data behind it; ``dashboard.Dashboard`` lays them out and feeds them.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import anywidget
import ipywidgets as w
import traitlets

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


class OtherRuns:
    """The runs of this kernel still going besides this dashboard's, each with its Stop: a re-run of a cell where
    the frontend sends no cell id (classic Notebook 6.5) cannot tell which run the cell started before, so it stops
    none and says which are going (none are left unseen)."""

    def __init__(self, others: list["Run"]) -> None:
        self.runs = others
        self.head = w.HTML()
        self.buttons: list[w.Button] = []
        rows: list[w.Widget] = []
        for r in others:
            b = w.Button(description="Stop", tooltip=f"stop {r.run_id} (SIGINT, grace, SIGTERM, SIGKILL)")
            b.add_class("memscope-other-stop")
            b.on_click(lambda _b, r=r: self._stop(r))
            label = w.HTML()
            self.buttons.append(b)
            rows.append(w.HBox([b, label]))
        self.labels = [row.children[1] for row in rows]
        self.widget = w.VBox([self.head, *rows])
        self.widget.add_class("memscope-others")
        if not others:
            self.widget.layout.display = "none"
        self.refresh()

    def _stop(self, r: "Run") -> None:
        r.stop(wait=False)
        self.refresh()

    def refresh(self) -> None:
        """The lines as they are now (a run that ended says so, its button off)."""
        from ..fmt import fmt_elapsed

        going = [r for r in self.runs if not r.ended]
        self.head.value = (
            f"<div style='color:#a15c00'>{len(going)} other run{'s' if len(going) != 1 else ''} of this kernel "
            "still going (a re-run does not stop them where the page sends no cell id):</div>"
            if going
            else "<div style='color:#777'>the other runs of this kernel have ended</div>"
        )
        for r, b, label in zip(self.runs, self.buttons, self.labels):
            ended = r.ended
            b.disabled = ended
            state = "ended" if ended else f"going {fmt_elapsed(r.elapsed())}"
            label.value = (
                f"<span style='font:12px monospace'>{esc(r.run_id)} · pid {r.pid} · {state} · "
                f"{esc(' '.join(r.command)[-80:])}</span>"
            )

    def html(self) -> str:
        """The same as static HTML (the copy's words)."""
        going = [r for r in self.runs if not r.ended]
        if not going:
            return ""
        items = "".join(
            f"<div style='font:12px monospace'>{esc(r.run_id)} · pid {r.pid} · {esc(' '.join(r.command)[-80:])}"
            f" · stop: memscope.runs()[{i}].stop()</div>"
            for i, r in enumerate(going)
        )
        return f"<div class='memscope-others' style='color:#a15c00'>other runs of this kernel still going:</div>{items}"


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


# The page's half of the static copy: it puts the kernel's latest copy into the notebook's own output (what a save
# writes), found by its key. Needed because a display id lives only in the page that received the display: after a
# reload, in a new tab, or for a notebook opened again while the run goes, the kernel's update_display_data reaches
# no output (nbformat keeps no display id, and the page routes updates through the futures of its own requests).
_KEEPER_ESM = r"""
function textOf(d) { return Array.isArray(d) ? d.join("") : (typeof d === "string" ? d : ""); }
function bundle(html) { return { output_type: "display_data", data: { "text/html": html, "text/plain": "" }, metadata: {} }; }
function placeLab(nb, mark, html) {          // JupyterLab 3/4, Notebook 7: the document's model
  let placed = 0;
  for (let i = 0; i < nb.cells.length; i++) {
    const outs = nb.cells.get(i).outputs;
    if (!outs) continue;
    for (let j = 0; j < outs.length; j++) {
      const text = textOf((outs.get(j).data || {})["text/html"]);
      if (text.includes(mark)) { if (text !== html) outs.set(j, bundle(html)); placed++; }
    }
  }
  return placed;
}
function placeClassic(J, mark, html) {       // classic Notebook 6.5: the cells' output areas
  let placed = 0;
  for (const cell of J.get_cells()) {
    const oa = cell.output_area;
    if (!oa || !oa.outputs) continue;
    oa.outputs.forEach((o, j) => {
      const text = textOf((o.data || {})["text/html"]);
      if (!text.includes(mark)) return;
      placed++;
      if (text === html) return;
      o.data["text/html"] = html;
      const area = oa.element.find(".output_area").eq(j).find(".output_html");
      if (area.length) area.html(html);
      J.set_dirty(true);
    });
  }
  return placed;
}
function place(model) {
  const html = model.get("html"), key = model.get("key");
  if (!html || !key) return;
  const mark = "memscope-static-" + key;
  try {
    const wm = model.widget_manager;
    const nb = wm && wm.context && wm.context.model;
    if (nb && nb.cells) return placeLab(nb, mark, html);
    const J = window.Jupyter && window.Jupyter.notebook;
    if (J && J.get_cells) return placeClassic(J, mark, html);
  } catch (e) { console.warn("memscope: the static copy was not updated", e); }
}
function render({ model, el }) {
  el.style.display = "none";
  el.className = "memscope-copy-keeper";
  model.on("change:html", () => place(model));
  place(model);
}
export default { render };
"""


class CopyKeeper(anywidget.AnyWidget):
    """An invisible widget in the dashboard that carries the static copy's latest HTML to every page that draws the
    dashboard, which writes it into the notebook's saved output (see _KEEPER_ESM)."""

    _esm = _KEEPER_ESM
    key = traitlets.Unicode("").tag(sync=True)
    html = traitlets.Unicode("").tag(sync=True)


def plain_text(html: str) -> str:
    """The copy's words without markup, for a frontend that shows only text (a terminal, nbconvert to text): its
    lines up to the picture (why, status, stop, verdict)."""
    import html as html_mod
    import re

    body = html.split("<svg", 1)[0]
    body = re.sub(r"<style>.*?</style>", "", body, flags=re.S)
    body = re.sub(r"</(div|p|li|tr|h\d)>|<br\s*/?>", "\n", body)
    text = html_mod.unescape(re.sub(r"<[^>]+>", "", body))
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def missing_line() -> str:
    """One line for the static copy: why the live dashboard may not be drawn here, and what fixes it (the kernel
    cannot see the page: it names the likely cause from its own ipywidgets)."""
    v = getattr(w, "__version__", "?")
    if v.split(".")[0].isdigit() and int(v.split(".")[0]) < 8:
        return (
            f"memscope: the live dashboard is not drawn here. This kernel has ipywidgets {v}, which JupyterLab 4 and "
            "Notebook 7 cannot draw: pip install -U 'ipywidgets>=8' in the kernel's environment and restart the "
            "kernel (JupyterLab 3 and Notebook 6 draw it as is). Without its kernel, this is the last copy."
        )
    return (
        f"memscope: the live dashboard is not drawn here: this page has no widget manager for ipywidgets {v} "
        "(pip install -U jupyterlab_widgets in the server's environment and reload), or the notebook is open "
        "without the kernel that made it, or a re-run replaced it (this is then the last copy)."
    )


class StaticCopy:
    """The dashboard as static HTML beside the live one: what a saved notebook shows without its kernel (hidden
    while the live one is drawn, through the CSS class ``memscope-live-<key>``)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.keeper = CopyKeeper(key=key)  # a child of the dashboard's box
        self.snap: dict[str, Any] = {}  # the chart's data at the last push
        self._handle: Any = None  # the display handle, once displayed
        self.at = 0.0  # time.monotonic() of the last update

    def html(self, status: str, card: str, table: str, stop: str = "") -> str:
        """The copy as it is now (``stop``: how to stop the run, while it goes)."""
        return static_html(self.key, status, card, table, self.snap, why=missing_line(), stop=stop)

    def display(self, html: str) -> None:
        """Display the copy (not on Colab: each output has its own frame there, so the CSS cannot hide it)."""
        from IPython.display import display

        if "google.colab" in sys.modules:
            return
        self.at = time.monotonic()
        self.keeper.html = html
        self._handle = display({"text/html": html, "text/plain": plain_text(html)}, raw=True, display_id=True)

    def update(self, html: str) -> None:
        """Replace the displayed copy by ``html``: by its display id in the page that displayed it, and through
        the keeper in every page that draws the dashboard (reloaded, a new tab, opened again)."""
        self.at = time.monotonic()
        try:
            self.keeper.html = html
        except Exception:
            pass
        if self._handle is not None:
            try:
                self._handle.update({"text/html": html, "text/plain": plain_text(html)}, raw=True)
            except Exception:  # never let the copy break the dashboard
                pass


class LiveCopyOnRead:
    """Copy-on-read as the run's live verdict last found it on the record (``session/verdict.py`` reads it at each
    refit: not read a second time here), while DataLoader workers are alive; once found, kept (their copies stay)
    and brought up to date (its bound, levelled off)."""

    def __init__(self) -> None:
        self.found: dict[str, Any] | None = None

    def update(self, run: Run | None, procs: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
        """The latest finding (None before any)."""
        if run is None:
            return self.found
        if not any(d.get("role") == cor_mod.WORKER_ROLE and d.get("alive", True) for d in procs.values()):
            return self.found
        found = run.live_verdict.copy_on_read
        if found is not None and (found.get("detected") or not (self.found or {}).get("detected")):
            self.found = found
        return self.found
