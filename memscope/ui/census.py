"""The tensor census as HTML, for the notebook (dashboard and ``Census._repr_html_``) and the report."""

from __future__ import annotations

import html
from typing import Any

from ..analysis.census import shape_str
from ..fmt import fmt_bytes


def census_html(c: dict[str, Any]) -> str:
    """The census as an HTML block (every string from the process escaped)."""
    e = html.escape

    def table(head: list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th style='text-align:left;padding-right:10px'>{h}</th>" for h in head)
        body = "".join(
            "<tr>" + "".join(f"<td style='padding-right:10px'>{e(str(v))}</td>" for v in r) + "</tr>" for r in rows
        )
        return f"<table style='font-size:12px;font-family:monospace'><tr>{th}</tr>{body}</table>"

    parts = [
        f"<div class='memscope-census'><b>Tensor census</b> of pid {c['pid']} at {c['t_s']:.1f} s: "
        f"{c['objects']:,} objects, {c['tensor_count']:,} tensors on {e(fmt_bytes(c.get('storage_bytes') or 0, 'tenth'))} "
        f"of storage ({e(fmt_bytes(c['tensor_bytes'], 'tenth'))} counting each view; took {c['duration_s']:.2f} s)"
    ]
    if c.get("advice"):
        parts.append(f"<div style='color:#b26a00;margin:4px 0'>{e(c['advice'])}</div>")
    d = c.get("diff") or {}
    if d.get("since") is not None and d.get("tensors"):
        parts.append(f"<div>since the census at {d['since']:.1f} s:</div>")
        parts.append(
            table(
                ["Δcount", "dtype", "shape", "device", "Δbytes", "Δgrad_fn"],
                [
                    [
                        f"{r['count']:+,}",
                        r["dtype"],
                        shape_str(r["shape"]),
                        r["device"],
                        fmt_bytes(r["bytes"], "tenth"),
                        f"{r['grad_fn']:+,}",
                    ]
                    for r in d["tensors"][:6]
                ],
            )
        )
    parts.append(
        table(
            ["count", "dtype", "shape", "device", "bytes", "grad_fn", "requires_grad"],
            [
                [
                    f"{r['count']:,}",
                    r["dtype"],
                    shape_str(r["shape"]),
                    r["device"],
                    fmt_bytes(r["bytes"], "tenth"),
                    f"{r['grad_fn']:,}",
                    f"{r['requires_grad']:,}",
                ]
                for r in c.get("tensors", [])[:6]
            ],
        )
    )
    if c.get("containers"):
        parts.append(table(["largest containers", "len"], [[r["type"], f"{r['len']:,}"] for r in c["containers"][:3]]))
    parts.append("</div>")
    return "".join(parts)
