"""The glibc heap probe's section of the summary (``malloc``), from the agents' ``malloc`` events. Pure."""

from __future__ import annotations

from typing import Any, Iterable

from ...fmt import fmt_bytes
from . import top_advice as _top_advice

HELD_ADVICE_BYTES = 256 << 20  # glibc free-but-held memory worth a malloc_trim hint ...
HELD_ADVICE_SHARE = 0.25  # ... when it is also this share of the heap


def summarize_malloc(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """glibc's heap per process: last and peak figures, with a malloc_trim hint where much is free but held."""
    per: dict[int | None, dict[str, Any]] = {}
    for e in events:
        d = e["data"]
        row = per.get(e["pid"])
        if row is None:
            row = per[e["pid"]] = {"pid": e["pid"], "peak_in_use_bytes": 0, "peak_free_held_bytes": 0}
        for k in ("in_use_bytes", "free_held_bytes", "releasable_bytes", "arena_bytes", "mmap_bytes"):
            row[k] = d.get(k)
        row["peak_in_use_bytes"] = max(row["peak_in_use_bytes"], d.get("in_use_bytes") or 0)
        row["peak_free_held_bytes"] = max(row["peak_free_held_bytes"], d.get("free_held_bytes") or 0)
        row["at_s"] = round(e["t"], 3)
    rows = list(per.values())
    for r in rows:
        r["advice"] = malloc_advice(r)
    return {
        "processes": rows,
        "free_held_bytes": sum(r.get("free_held_bytes") or 0 for r in rows),
        "advice": _top_advice(rows, "peak_free_held_bytes"),
    }


def malloc_advice(r: dict[str, Any]) -> str | None:
    """A malloc_trim hint for a process whose heap holds much freed memory, else None."""
    held, used = r.get("peak_free_held_bytes") or 0, r.get("in_use_bytes") or 0
    if held < HELD_ADVICE_BYTES or held < HELD_ADVICE_SHARE * (held + used):
        return None
    return (
        f"pid {r['pid']}: glibc held up to {fmt_bytes(held, 'tenth')} of freed memory without returning it to the kernel "
        f"({fmt_bytes(used, 'tenth')} in use at the end); call ctypes.CDLL('libc.so.6').malloc_trim(0) after the step that "
        f"frees it, or run with MALLOC_ARENA_MAX=2 / MALLOC_TRIM_THRESHOLD_=<bytes>"
    )


def summarize(events: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The section from the probe's events by kind (the registry's entry point)."""
    return summarize_malloc(events.get("malloc", []))
