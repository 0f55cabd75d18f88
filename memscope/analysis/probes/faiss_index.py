"""The FAISS probe's section of the summary (``faiss``), from the agents' ``faiss_index`` events. Pure."""

from __future__ import annotations

from typing import Any, Iterable

from ...fmt import fmt_bytes
from . import top_advice as _top_advice

FLAT_ADVICE_BYTES = 1 << 30  # a flat FAISS index this large: say what a compressed one would hold


def summarize_faiss(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Every index seen: its last known size and whether it was still alive; totals count each index once
    (a quantizer or storage inside another index is not added twice)."""
    idx: dict[str, dict[str, Any]] = {}
    for e in events:
        d = e["data"]
        lid = d.get("id")
        if lid is None:
            continue
        row = idx.get(lid)
        if row is None:
            row = idx[lid] = {
                "id": lid,
                "pid": e["pid"],
                "how": None,
                "type": None,
                "d": None,
                "ntotal": 0,
                "est_bytes": 0,
                "peak_est_bytes": 0,
                "serialized_bytes": None,
                "serialized_ntotal": None,
                "alive": True,
                "created_s": round(e["t"], 3),
                "freed_s": None,
                "children": [],
                "ptr": None,
                "gpu": False,
                "advice": None,
            }
        ev = d.get("ev")
        if ev == "freed":
            row["alive"], row["freed_s"] = False, round(e["t"], 3)
            n = d.get("ntotal")
            if n and row["ntotal"] and n > row["ntotal"]:  # adds not yet reported: scale by vectors
                row["est_bytes"] = int(row["est_bytes"] * n / row["ntotal"])
                row["ntotal"] = n
                row["peak_est_bytes"] = max(row["peak_est_bytes"], row["est_bytes"])
            continue
        for k in ("how", "type", "d", "ntotal", "est_bytes", "children", "ptr", "gpu"):
            if d.get(k) is not None:
                row[k] = d[k]
        if d.get("serialized_bytes") is not None:
            row["serialized_bytes"] = d["serialized_bytes"]
            row["serialized_ntotal"] = d.get("ntotal", row["ntotal"])
        row["peak_est_bytes"] = max(row["peak_est_bytes"], row["est_bytes"] or 0)
    rows = sorted(idx.values(), key=lambda r: r["created_s"])
    inside = {(r["pid"], c) for r in rows if r["alive"] for c in (r["children"] or [])}
    for r in rows:
        r["inside_other"] = (r["pid"], r["ptr"]) in inside and r["alive"]
        r["advice"] = faiss_advice(r)
    live = [r for r in rows if r["alive"] and not r["inside_other"]]
    return {
        "indexes": rows,
        "live_count": len(live),
        "live_est_bytes": sum(r["est_bytes"] or 0 for r in live),
        "peak_index_bytes": max((r["peak_est_bytes"] for r in rows), default=0),
        "advice": _top_advice(rows, "peak_est_bytes"),
    }


def faiss_advice(r: dict[str, Any]) -> str | None:
    """One line of advice for an index that holds more than it needs to, else None."""
    t, size = r.get("type") or "", r.get("peak_est_bytes") or 0
    if t in ("IndexFlat", "IndexFlatL2", "IndexFlatIP") and size >= FLAT_ADVICE_BYTES:
        return (
            f"{t} (d={r['d']}, {r['ntotal']:,} vectors) holds a full float32 copy of the vectors "
            f"({fmt_bytes(size, 'tenth')}); if they are also in a NumPy array that is twice; IVF+PQ "
            f"(faiss.index_factory({r['d']}, 'IVF4096,PQ{max(1, (r['d'] or 8) // 8)}')) holds ~30x less"
        )
    return None


def summarize(events: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The section from the probe's events by kind (the registry's entry point)."""
    return summarize_faiss(events.get("faiss_index", []))
