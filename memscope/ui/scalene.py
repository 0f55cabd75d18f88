"""Scalene snapshots as HTML for the dashboard: one block per snapshot, its hottest lines, its report's path."""

from __future__ import annotations

import html
import os
from typing import Any


def snapshots_html(snaps: list[dict[str, Any]]) -> str:
    """Newest first. Everything that comes from the profiled program (paths, source lines) is escaped."""
    e = html.escape
    if not snaps:
        return (
            "<div class='memscope-scalene' style='font-size:12px'>No Scalene snapshot yet: the "
            "“Scalene snapshot” button profiles the next 10 seconds.</div>"
        )
    parts = ["<div class='memscope-scalene' style='font-size:12px'>"]
    for s in reversed(snaps):
        memory = s.get("mode") == "memory"
        t = s.get("t_s")
        at = f" at {float(t):.1f} s" if t is not None else ""
        head = (
            f"<b>Scalene snapshot #{e(str(s.get('index')))}</b>{at}: {float(s.get('window_s') or 0):.1f} s "
            f"profiled, {float(s.get('cpu_s') or 0):.2f} s of CPU sampled, pid {e(str(s.get('pid')))}"
        )
        if s.get("note"):
            head += f" <span style='color:#b26a00'>({e(str(s['note']))})</span>"
        parts.append(f"<div style='margin-top:6px'>{head}</div>")
        cols = ["line", "code", "CPU %", "Python %", "native %"] + (["alloc MB", "peak MB"] if memory else [])
        th = "".join(f"<th style='text-align:left;padding-right:10px'>{c}</th>" for c in cols)
        rows = []
        for r in s.get("top") or []:
            cells = [
                f"{os.path.basename(str(r.get('file', '')))}:{r.get('line')}",
                str(r.get("code", ""))[:100],
                f"{float(r.get('cpu_percent', 0)):.1f}",
                f"{float(r.get('python_percent', 0)):.1f}",
                f"{float(r.get('native_percent', 0)):.1f}",
            ]
            if memory:
                cells += [f"{float(r.get('malloc_mb', 0)):.1f}", f"{float(r.get('peak_mb', 0)):.1f}"]
            rows.append("<tr>" + "".join(f"<td style='padding-right:10px'>{e(c)}</td>" for c in cells) + "</tr>")
        if not rows:
            rows.append(
                f"<tr><td colspan='{len(cols)}'>no line of the script used 0.5% of the CPU in this window</td></tr>"
            )
        parts.append(f"<table style='font-family:monospace'><tr>{th}</tr>{''.join(rows)}</table>")
        if s.get("html_path"):
            parts.append(f"<div>full Scalene report: <code>{e(str(s['html_path']))}</code></div>")
    parts.append("</div>")
    return "".join(parts)
