"""What the probes' panels share: escaping, a table, the advice list."""

from __future__ import annotations

import html
from typing import Any

_CELL = "style='text-align:left;padding-right:10px'"


def esc(s: Any) -> str:
    """Text as HTML, quotes escaped."""
    return html.escape(str(s), quote=True)


def table(head: tuple[str, ...], rows: list[list[str]]) -> str:
    """A small monospace table; cells are HTML already."""
    th = "".join(f"<th {_CELL}>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td {_CELL}>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table style='font-size:12px;font-family:monospace'><tr>{th}</tr>{body}</table>"


def advice_list(items: list[dict[str, Any]]) -> str:
    """The rows' advice lines as a list (empty when none has one)."""
    lines = [f"<li>{esc(r['advice'])}</li>" for r in items if r.get("advice")]
    return (
        f"<ul class='memscope-probe-advice' style='color:#b26a00;margin:4px 0'>{''.join(lines)}</ul>" if lines else ""
    )
