"""The "Loads and indexes" panel: NumPy loads, FAISS indexes and glibc's heap, as escaped HTML, one file per
probe beside this one (``<module>.py``, named as in ``agent/protocol.PROBES``).

``probes_html(summary_part)`` renders the summary keys ``loads``, ``faiss`` and ``malloc``; ``ProbesFeed`` keeps
the live run's probe events (the record so far, then the subscription) and renders them the same way, through
the same pure analysis functions, recomputed only when an event arrived.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from ...agent.protocol import PROBES
from ...analysis.probes import summarize_events
from ...record.reader import RunData

if TYPE_CHECKING:
    from ...session.run import Run

# The kinds the panels are made from: every message kind of a probe that has a section (the registry's).
KINDS = tuple(k for _module, key, kinds in PROBES if key is not None for k in kinds)


def panels() -> list[ModuleType]:
    """Each probe's panel module (``KEY``, ``EMPTY``, ``html``, ``shown``), in the registry's order."""
    # Imported by name from the registry: a new probe adds its line there and its panel file here, nothing else.
    return [importlib.import_module(f"{__name__}.{module}") for module, key, _kinds in PROBES if key is not None]


def probes_html(part: dict[str, Any]) -> str:
    """The panel from the summary keys ``loads``, ``faiss`` and ``malloc`` (any may be missing)."""
    return "<div class='memscope-probes'>" + "".join(p.html(part.get(p.KEY) or p.EMPTY) for p in panels()) + "</div>"


def any_shown(summary: dict[str, Any]) -> bool:
    """Whether any probe's section of ``summary`` has something to show."""
    return any(p.shown(summary.get(p.KEY)) for p in panels())


class ProbesFeed:
    """The live run's probe events, seeded from its record, then kept by a subscription of its own."""

    def __init__(self, run: "Run | None") -> None:
        self._events: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        self._keys: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()
        self._version = 0
        self._rendered: tuple[int, str] = (-1, "")
        self._unsubscribe: Callable[[], None] | None = None
        if run is not None:
            self._unsubscribe = run.subscribe(self._on_record)
            for e in _recorded(run.record_path):
                self._add(e["kind"], e)

    def _on_record(self, rec: Any) -> None:
        kind = getattr(rec, "kind", None)
        if type(rec).__name__ == "Event" and kind in self._events:
            self._add(kind, {"t": rec.t, "pid": rec.pid, "data": rec.data})
        elif type(rec).__name__ == "RunEnded":
            self.close()

    def _add(self, kind: str, e: dict[str, Any]) -> None:
        d = e["data"]  # the record and the subscription overlap at the start: keep each message once
        key = (kind, round(e["t"], 6), e["pid"], str(d.get("id")), str(d.get("ev")), str(d.get("reads")))
        with self._lock:
            if key in self._keys:
                return
            self._keys.add(key)
            self._events[kind].append(e)
            self._version += 1

    def html(self, summary: dict[str, Any] | None = None) -> str:
        """The panel: from the final summary once there is one, else from the events so far."""
        if summary is not None and "loads" in summary:
            return probes_html(summary)
        with self._lock:
            if self._rendered[0] == self._version:
                return self._rendered[1]
            version = self._version
            ev = {k: sorted(v, key=lambda e: e["t"]) for k, v in self._events.items()}
        text = probes_html(summarize_events(ev))
        self._rendered = (version, text)
        return text

    def close(self) -> None:
        """Stop following the run."""
        if self._unsubscribe is not None:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            unsubscribe()


def _recorded(path: str) -> list[dict[str, Any]]:
    try:
        rd = RunData(path)
        try:
            return [e for k in KINDS for e in rd.events(k)]
        finally:
            rd.close()
    except Exception:
        return []
