"""The "Loads and indexes" panel: NumPy loads, FAISS indexes and glibc's heap, as escaped HTML.

``probes_html(summary_part)`` renders the summary keys ``loads``, ``faiss`` and ``malloc``; ``ProbesFeed`` keeps
the live run's probe events (the record so far, then the subscription) and renders them the same way, through
the same pure analysis functions, recomputed only when an event arrived.
"""
from __future__ import annotations

import html
import os
import threading
from typing import TYPE_CHECKING, Any, Callable

from ..analysis.loads import summarize_faiss, summarize_loads, summarize_malloc
from ..fmt import fmt_bytes

if TYPE_CHECKING:
    from ..session.run import Run

KINDS = ("np_load", "np_read", "faiss_index", "malloc")
_CELL = "style='text-align:left;padding-right:10px'"


def _esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _table(head: tuple[str, ...], rows: list[list[str]]) -> str:
    th = "".join(f"<th {_CELL}>{_esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td {_CELL}>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table style='font-size:12px;font-family:monospace'><tr>{th}</tr>{body}</table>"


def _advice(items: list[dict[str, Any]]) -> str:
    lines = [f"<li>{_esc(r['advice'])}</li>" for r in items if r.get("advice")]
    return f"<ul class='memscope-probe-advice' style='color:#b26a00;margin:4px 0'>{''.join(lines)}</ul>" \
        if lines else ""


def loads_html(loads: list[dict[str, Any]]) -> str:
    if not loads:
        return "<div>NumPy: no np.load seen.</div>"
    rows = []
    for r in loads:
        mm = "yes" if r.get("mmapped") else ("IGNORED" if r.get("requested_mmap") else "no")
        ram = fmt_bytes(r.get("rss_delta_bytes"), "tenth") if r.get("rss_delta_bytes") is not None else "–"
        if r.get("resident_bytes") is not None:
            ram = f"{fmt_bytes(r['resident_bytes'], 'tenth')} resident ({fmt_bytes(r.get('resident_file_bytes'), 'tenth')} file)"
        rows.append([_esc(os.path.basename(r["path"])), _esc(r.get("key") or ""),
                     _esc("×".join(str(s) for s in r["shape"]) if r.get("shape") else ""), _esc(r.get("dtype") or ""),
                     _esc(fmt_bytes(r.get("nbytes"), "tenth")), "zip" if r.get("compressed") else "",
                     _esc(f"{r.get('requested_mmap') or '–'} → {mm}"), _esc(r.get("reads")),
                     _esc(f"{r.get('duration_s') or 0:.3f} s"), _esc(ram)])
    return ("<div><b>NumPy loads</b></div>" +
            _table(("file", "member", "shape", "dtype", "size", "", "mmap asked → got", "reads", "time",
                    "RAM (anon+file)"), rows) + _advice(loads))


def faiss_html(faiss: dict[str, Any]) -> str:
    indexes = faiss.get("indexes") or []
    if not indexes:
        return ""
    rows = []
    for r in indexes:
        state = "alive" if r.get("alive") else "freed"
        if r.get("inside_other"):
            state += " (inside another index)"
        ser = fmt_bytes(r["serialized_bytes"], "tenth") if r.get("serialized_bytes") is not None else "–"
        rows.append([_esc(r.get("type")), _esc(r.get("how")), _esc(r.get("d")), _esc(f"{r.get('ntotal') or 0:,}"),
                     _esc(fmt_bytes(r.get("est_bytes"), "tenth")), _esc(ser), _esc(state)])
    return (f"<div style='margin-top:6px'><b>FAISS indexes</b>: {faiss.get('live_count', 0)} alive, about "
            f"{_esc(fmt_bytes(faiss.get('live_est_bytes'), 'tenth'))}</div>" +
            _table(("type", "made by", "d", "ntotal", "estimated", "serialized", "state"), rows) +
            _advice(indexes))


def malloc_html(malloc: dict[str, Any]) -> str:
    procs = malloc.get("processes") or []
    if not procs:
        return ""
    rows = [[_esc(r["pid"]), _esc(fmt_bytes(r.get("in_use_bytes"), "tenth")), _esc(fmt_bytes(r.get("free_held_bytes"), "tenth")),
             _esc(fmt_bytes(r.get("peak_free_held_bytes"), "tenth")), _esc(fmt_bytes(r.get("releasable_bytes"), "tenth"))] for r in procs]
    return ("<div style='margin-top:6px'><b>glibc heap</b> (mallinfo2)</div>" +
            _table(("pid", "in use", "free but held", "peak held", "trim could return"), rows) + _advice(procs))


def probes_html(part: dict[str, Any]) -> str:
    """The panel from the summary keys ``loads``, ``faiss`` and ``malloc`` (any may be missing)."""
    return (f"<div class='memscope-probes'>{loads_html(part.get('loads') or [])}"
            f"{faiss_html(part.get('faiss') or {})}{malloc_html(part.get('malloc') or {})}</div>")


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
        text = probes_html({"loads": summarize_loads(ev["np_load"], ev["np_read"]),
                            "faiss": summarize_faiss(ev["faiss_index"]),
                            "malloc": summarize_malloc(ev["malloc"])})
        self._rendered = (version, text)
        return text

    def close(self) -> None:
        if self._unsubscribe is not None:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            unsubscribe()


def _recorded(path: str) -> list[dict[str, Any]]:
    from ..record.reader import RunData

    try:
        rd = RunData(path)
        try:
            return [e for k in KINDS for e in rd.events(k)]
        finally:
            rd.close()
    except Exception:
        return []
