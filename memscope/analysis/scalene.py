"""The summary's ``scalene`` key: one dict per Scalene snapshot taken during the run (issue 6)."""
from __future__ import annotations

from typing import Any

TOP_IN_SUMMARY = 5


def summary_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """From the record's "scalene_snapshot" events: when, how long, the hottest lines, and the report's path."""
    out = []
    for e in sorted(events, key=lambda e: e["t"]):
        d = e["data"]
        out.append({
            "index": d.get("index"), "t_s": round(float(e["t"]), 3), "pid": d.get("pid"), "mode": d.get("mode"),
            "seconds": d.get("seconds"), "window_s": d.get("window_s"), "cpu_s": d.get("cpu_s"),
            "top": list(d.get("top") or [])[:TOP_IN_SUMMARY], "html_path": d.get("html_path"),
            "json_path": d.get("json_path"), "note": d.get("note") or "",
        })
    return out
