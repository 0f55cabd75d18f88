"""The FAISS indexes panel."""

from __future__ import annotations

from typing import Any

from ...fmt import fmt_bytes
from ._html import advice_list, esc, table

KEY = "faiss"
EMPTY: Any = {}  # the section when the summary has none


def html(faiss: dict[str, Any]) -> str:
    """The panel's HTML from the summary's ``faiss``."""
    indexes = faiss.get("indexes") or []
    if not indexes:
        return ""
    rows = []
    for r in indexes:
        state = "alive" if r.get("alive") else "freed"
        if r.get("inside_other"):
            state += " (inside another index)"
        ser = fmt_bytes(r["serialized_bytes"], "tenth") if r.get("serialized_bytes") is not None else "–"
        rows.append(
            [
                esc(r.get("type")),
                esc(r.get("how")),
                esc(r.get("d")),
                esc(f"{r.get('ntotal') or 0:,}"),
                esc(fmt_bytes(r.get("est_bytes"), "tenth")),
                esc(ser),
                esc(state),
            ]
        )
    return (
        f"<div style='margin-top:6px'><b>FAISS indexes</b>: {faiss.get('live_count', 0)} alive, about "
        f"{esc(fmt_bytes(faiss.get('live_est_bytes'), 'tenth'))}</div>"
        + table(("type", "made by", "d", "ntotal", "estimated", "serialized", "state"), rows)
        + advice_list(indexes)
    )


def shown(part: Any) -> bool:
    """Whether the section has anything to show (a standalone report leaves the panel out otherwise)."""
    return bool((part or {}).get("indexes"))
