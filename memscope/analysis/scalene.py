"""Scalene's profiles read: each window's hottest lines from its cumulative JSON, and the summary's ``scalene``
key (one dict per snapshot taken during the run, issue 6). Pure: Scalene is never imported here."""

from __future__ import annotations

import re
from typing import Any

TOP_IN_SUMMARY = 5
TOP_N = 15


def summary_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """From the record's "scalene_snapshot" events: when, how long, the hottest lines, and the report's path."""
    out = []
    for e in sorted(events, key=lambda e: e["t"]):
        d = e["data"]
        out.append(
            {
                "index": d.get("index"),
                "t_s": round(float(e["t"]), 3),
                "pid": d.get("pid"),
                "mode": d.get("mode"),
                "seconds": d.get("seconds"),
                "window_s": d.get("window_s"),
                "cpu_s": d.get("cpu_s"),
                "top": list(d.get("top") or [])[:TOP_IN_SUMMARY],
                "html_path": d.get("html_path"),
                "json_path": d.get("json_path"),
                "note": d.get("note") or "",
            }
        )
    return out


# -- reading Scalene's JSON ------------------------------------------------------------------------------------


def line_totals(
    profile: dict[str, Any], total_cpu_s: float | None
) -> tuple[dict[tuple[str, int], dict[str, Any]], float]:
    """Per (file, line): cumulative seconds (python, native, system) and memory counters; and the CPU total used.

    Scalene's percentages are of its total CPU sample time; without that total (an agent that could not read
    it) the profiled wall time stands in for it, which is right for one busy core.
    """
    total = float(total_cpu_s) if total_cpu_s else float(profile.get("elapsed_time_sec") or 0.0)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for fname, fdata in (profile.get("files") or {}).items():
        for ln in fdata.get("lines") or []:
            py, c, sys_ = (
                float(ln.get(k) or 0.0) for k in ("n_cpu_percent_python", "n_cpu_percent_c", "n_sys_percent")
            )
            malloc = float(ln.get("n_malloc_mb") or 0.0)
            if not (py or c or sys_ or malloc):
                continue
            out[(fname, int(ln["lineno"]))] = {
                "python_s": py * total / 100,
                "native_s": c * total / 100,
                "system_s": sys_ * total / 100,
                "malloc_mb": malloc,
                "mallocs": int(ln.get("n_mallocs") or 0),
                "peak_mb": float(ln.get("n_peak_mb") or 0.0),
                "code": _source(ln.get("line")),
            }
    return out, total


def _source(text: Any) -> str:
    """Scalene writes "<" in source lines as the six characters \\u003c: give the line back as written."""
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), str(text or "")).strip()[:200]


def diff_profiles(
    prev: tuple[dict[str, Any], float | None] | None,
    cur: tuple[dict[str, Any], float | None],
    memory: bool,
    top_n: int = TOP_N,
) -> tuple[list[dict[str, Any]], float, float]:
    """The window between two cumulative profiles: (top rows, window wall seconds, window CPU seconds).

    Rows: file, line, code, cpu_percent (python + native, of the window's CPU time, as Scalene counts it),
    python_percent, native_percent, system_percent, cpu_seconds; with ``memory``: malloc_mb and mallocs in the
    window, and peak_mb (the line's peak footprint since the start: Scalene keeps no per-window peak).
    """
    before, t_before = line_totals(*prev) if prev else ({}, 0.0)
    after, t_after = line_totals(*cur)
    window_cpu = max(t_after - t_before, 0.0)
    window_s = max(
        float(cur[0].get("elapsed_time_sec") or 0.0) - (float(prev[0].get("elapsed_time_sec") or 0.0) if prev else 0.0),
        0.0,
    )
    rows = []
    zero = {"python_s": 0.0, "native_s": 0.0, "system_s": 0.0, "malloc_mb": 0.0, "mallocs": 0}
    for (fname, lineno), a in after.items():
        b = before.get((fname, lineno), zero)
        d = {k: max(a[k] - b[k], 0.0) for k in ("python_s", "native_s", "system_s", "malloc_mb")}

        def pct(s: float) -> float:
            return round(100.0 * s / window_cpu, 2) if window_cpu > 0 else 0.0

        row: dict[str, Any] = {
            "file": fname,
            "line": lineno,
            "code": a["code"],
            "cpu_percent": pct(d["python_s"] + d["native_s"]),
            "python_percent": pct(d["python_s"]),
            "native_percent": pct(d["native_s"]),
            "system_percent": pct(d["system_s"]),
            "cpu_seconds": round(d["python_s"] + d["native_s"], 4),
        }
        if memory:
            row.update(
                malloc_mb=round(d["malloc_mb"], 2),
                mallocs=max(a["mallocs"] - int(b["mallocs"]), 0),
                peak_mb=round(a["peak_mb"], 2),
            )
        if row["cpu_percent"] >= 0.5 or (memory and row["malloc_mb"] >= 1.0):
            rows.append(row)
    rows.sort(key=lambda r: (-r["cpu_percent"], -r.get("malloc_mb", 0.0), r["file"], r["line"]))
    return rows[:top_n], round(window_s, 3), round(window_cpu, 3)
