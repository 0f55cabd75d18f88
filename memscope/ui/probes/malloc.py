"""The glibc heap panel."""

from __future__ import annotations

from typing import Any

from ...fmt import fmt_bytes
from ._html import advice_list, esc, table

KEY = "malloc"
EMPTY: Any = {}  # the section when the summary has none


def html(malloc: dict[str, Any]) -> str:
    """The panel's HTML from the summary's ``malloc``."""
    procs = malloc.get("processes") or []
    if not procs:
        return ""
    rows = [
        [
            esc(r["pid"]),
            esc(fmt_bytes(r.get("in_use_bytes"), "tenth")),
            esc(fmt_bytes(r.get("free_held_bytes"), "tenth")),
            esc(fmt_bytes(r.get("peak_free_held_bytes"), "tenth")),
            esc(fmt_bytes(r.get("releasable_bytes"), "tenth")),
        ]
        for r in procs
    ]
    return (
        "<div style='margin-top:6px'><b>glibc heap</b> (mallinfo2)</div>"
        + table(("pid", "in use", "free but held", "peak held", "trim could return"), rows)
        + advice_list(procs)
    )


def shown(part: Any) -> bool:
    """Whether the section has anything to show (a standalone report leaves the panel out otherwise)."""
    return bool((part or {}).get("processes"))
