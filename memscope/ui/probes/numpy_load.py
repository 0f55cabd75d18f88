"""The NumPy loads panel."""

from __future__ import annotations

import os
from typing import Any

from ...fmt import fmt_bytes
from ._html import advice_list, esc, table

KEY = "loads"
EMPTY: Any = []  # the section when the summary has none


def html(loads: list[dict[str, Any]]) -> str:
    """The panel's HTML from the summary's ``loads``."""
    if not loads:
        return "<div>NumPy: no np.load seen.</div>"
    rows = []
    for r in loads:
        mm = "yes" if r.get("mmapped") else ("IGNORED" if r.get("requested_mmap") else "no")
        ram = fmt_bytes(r.get("rss_delta_bytes"), "tenth") if r.get("rss_delta_bytes") is not None else "–"
        if r.get("resident_bytes") is not None:
            ram = f"{fmt_bytes(r['resident_bytes'], 'tenth')} resident ({fmt_bytes(r.get('resident_file_bytes'), 'tenth')} file)"
        rows.append(
            [
                esc(os.path.basename(r["path"])),
                esc(r.get("key") or ""),
                esc("×".join(str(s) for s in r["shape"]) if r.get("shape") else ""),
                esc(r.get("dtype") or ""),
                esc(fmt_bytes(r.get("nbytes"), "tenth")),
                "zip" if r.get("compressed") else "",
                esc(f"{r.get('requested_mmap') or '–'} → {mm}"),
                esc(r.get("reads")),
                esc(f"{r.get('duration_s') or 0:.3f} s"),
                esc(ram),
            ]
        )
    return (
        "<div><b>NumPy loads</b></div>"
        + table(
            ("file", "member", "shape", "dtype", "size", "", "mmap asked → got", "reads", "time", "RAM (anon+file)"),
            rows,
        )
        + advice_list(loads)
    )


def shown(part: Any) -> bool:
    """Whether the section has anything to show (a standalone report leaves the panel out otherwise)."""
    return bool(part)
