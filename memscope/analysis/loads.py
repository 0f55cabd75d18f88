"""What the in-process probes saw about data and heaps: NumPy loads (``loads``), FAISS indexes (``faiss``) and
glibc's heap (``malloc``), from the agents' ``np_load``, ``np_read``, ``faiss_index`` and ``malloc`` events.

Pure: events in, summary keys out (each row may carry an ``advice`` line; analysis/advice.py lifts them).
"""
from __future__ import annotations

import os
from typing import Any, Iterable

from ..fmt import fmt_bytes
from ..record.reader import RunData

BIG_BYTES = 1 << 30            # a whole-array read this large is worth a line of advice by itself
FLAT_ADVICE_BYTES = 1 << 30    # a flat FAISS index this large: say what a compressed one would hold
HELD_ADVICE_BYTES = 256 << 20  # glibc free-but-held memory worth a malloc_trim hint ...
HELD_ADVICE_SHARE = 0.25       # ... when it is also this share of the heap


def probe_summary(rd: RunData) -> dict[str, Any]:
    """The summary keys ``loads``, ``faiss`` and ``malloc`` of a record."""
    return {
        "loads": summarize_loads(rd.events("np_load"), rd.events("np_read")),
        "faiss": summarize_faiss(rd.events("faiss_index")),
        "malloc": summarize_malloc(rd.events("malloc")),
    }


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


def _row(path: str, key: str | None, **kw: Any) -> dict[str, Any]:
    row = {"path": path, "key": key, "shape": None, "dtype": None, "nbytes": None, "compressed": None,
           "requested_mmap": None, "mmapped": False, "reads": 0, "duration_s": 0.0, "rss_delta_bytes": None,
           "anon_delta_bytes": None, "file_delta_bytes": None, "advice": None}
    row.update(kw)
    row["rss_delta_bytes"] = _sum(row["anon_delta_bytes"], row["file_delta_bytes"])
    return row


def summarize_loads(load_events: Iterable[dict[str, Any]], read_events: Iterable[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """One row per .npy path, per .npz member read (or per .npz with no member read), per group of small loads."""
    opens: dict[str, dict[str, Any]] = {}      # load id -> the open message
    resident: dict[str, dict[str, int]] = {}  # load id -> peak residency of its memmap
    groups: dict[tuple[int | None, str], dict[str, Any]] = {}
    for e in load_events:
        d = e["data"]
        ev = d.get("ev")
        if ev == "open":
            opens[d["id"]] = d
        elif ev == "resident":
            r = resident.setdefault(d["id"], {"resident_bytes": 0, "resident_file_bytes": 0,
                                              "resident_anon_bytes": 0})
            r["resident_bytes"] = max(r["resident_bytes"], d.get("resident_bytes") or 0)
            r["resident_file_bytes"] = max(r["resident_file_bytes"], d.get("file_bytes") or 0)
            r["resident_anon_bytes"] = max(r["resident_anon_bytes"], d.get("anon_bytes") or 0)
        elif ev == "group":
            groups[(e["pid"], d["id"])] = d  # counts are cumulative per process: the last one holds

    # Member reads: each message holds the running count of one (process, load, member); keep the last.
    last_read: dict[tuple[int | None, str, str], dict[str, Any]] = {}
    for e in read_events:
        d = e["data"]
        last_read[(e["pid"], d.get("id"), d.get("key"))] = dict(d, _t=e["t"])
    rows: dict[tuple[str, str | None], dict[str, Any]] = {}
    read_ids = set()
    for (pid, load_id, key), d in sorted(last_read.items(), key=lambda kv: kv[1]["_t"]):
        read_ids.add(load_id)
        k = (d.get("path") or "?", key)
        row = rows.get(k)
        opener = str(load_id or "").split("-")[0]
        forked_reader = opener.isdigit() and pid is not None and int(opener) != pid
        if row is None:
            rows[k] = _row(k[0], key, shape=d.get("shape"), dtype=d.get("dtype"), nbytes=d.get("nbytes"),
                           compressed=d.get("compressed"), requested_mmap=d.get("requested_mmap"), mmapped=False,
                           reads=int(d.get("reads") or 0), duration_s=float(d.get("duration_s") or 0.0),
                           anon_delta_bytes=d.get("anon_delta_bytes"), file_delta_bytes=d.get("file_delta_bytes"))
            row = rows[k]
        else:
            row["reads"] += int(d.get("reads") or 0)
            row["duration_s"] += float(d.get("duration_s") or 0.0)
            row["requested_mmap"] = row["requested_mmap"] or d.get("requested_mmap")
        if forked_reader:  # an NpzFile opened in one process and read in its forked children
            row["shared_after_fork"] = sorted(set(row.get("shared_after_fork") or []) | {pid})

    for load_id, d in opens.items():
        path = d.get("path") or "?"
        if d.get("kind") == "npz":
            if load_id in read_ids:
                continue
            members = d.get("members") or []
            k = (path, None)
            if k in rows:
                rows[k]["reads"] += 0
                continue
            rows[k] = _row(path, None, nbytes=sum(int(m[1]) for m in members) if members else None,
                           compressed=any(bool(m[2]) for m in members) if members else None,
                           requested_mmap=d.get("requested_mmap"), mmapped=False, reads=0,
                           duration_s=float(d.get("duration_s") or 0.0),
                           anon_delta_bytes=d.get("anon_delta_bytes"), file_delta_bytes=d.get("file_delta_bytes"),
                           members=[m[0] for m in members])
            continue
        k = (path, None)
        row = rows.get(k)
        if row is None:
            row = rows[k] = _row(path, None, shape=d.get("shape"), dtype=d.get("dtype"), nbytes=d.get("nbytes"),
                                 compressed=False, requested_mmap=d.get("requested_mmap"),
                                 mmapped=bool(d.get("mmapped")), reads=0,
                                 anon_delta_bytes=d.get("anon_delta_bytes"),
                                 file_delta_bytes=d.get("file_delta_bytes"))
        row["reads"] += 1
        row["duration_s"] += float(d.get("duration_s") or 0.0)
        if load_id in resident:
            for name, v in resident[load_id].items():
                row[name] = max(row.get(name) or 0, v)

    for (_pid, _gid), d in groups.items():
        k = (d.get("path") or "?", None)
        row = rows.get(k)
        if row is None:
            rows[k] = _row(k[0], None, dtype=d.get("dtype"), nbytes=int(d.get("nbytes") or 0),
                           compressed=False, reads=int(d.get("count") or 0),
                           duration_s=float(d.get("duration_s") or 0.0), small_files=True)
        else:
            row["reads"] += int(d.get("count") or 0)
            row["nbytes"] = (row["nbytes"] or 0) + int(d.get("nbytes") or 0)
            row["duration_s"] += float(d.get("duration_s") or 0.0)

    out = list(rows.values())
    for row in out:
        row["duration_s"] = round(row["duration_s"], 6)
        row["advice"] = load_advice(row)
    return out


def load_advice(row: dict[str, Any]) -> str | None:
    """One actionable line where the row shows a cost the user can avoid, else None."""
    name = os.path.basename(row["path"])
    key, n, size = row["key"], row["reads"], fmt_bytes(row["nbytes"], "tenth")
    is_npz = name.endswith(".npz") or key is not None
    if row.get("small_files"):
        return None
    if is_npz and key is not None and row.get("shared_after_fork"):
        other = load_advice(dict(row, shared_after_fork=None))
        return (f"{name} was opened before a fork and read in {len(row['shared_after_fork'])} child processes "
                f"(DataLoader workers?): they share one file offset, so concurrent reads can fail (BadZipFile, "
                f"EOFError) or return wrong data; open it in each worker (lazily in __getitem__)"
                + (f". Also: {other}" if other else ""))
    if is_npz and key is not None:
        redo = "reads and decompresses" if row.get("compressed") else "reads"
        if row["requested_mmap"]:
            times = f" (read {n} times)" if n > 1 else ""
            return (f"{name}: mmap_mode is ignored for .npz; {key} ({size}) is read into RAM on every "
                    f"access{times}; save it with np.save and load it with mmap_mode='r'")
        if n > 1:
            return (f"{name}: {key} ({size}) was read {n} times; each data['{key}'] {redo} the whole array "
                    f"again; read it once (x = data['{key}']) and index x")
        if (row["nbytes"] or 0) >= BIG_BYTES:
            return (f"{name}: {key} ({size}) is read into RAM whole; save it with np.save and load it with "
                    f"mmap_mode='r' to page it in only as it is used")
        return None
    if is_npz:
        if row["requested_mmap"]:
            return f"{name}: mmap_mode is ignored for .npz: every member read will be a full copy in RAM"
        return None
    if row["requested_mmap"] and not row["mmapped"]:
        return f"{name}: mmap_mode={row['requested_mmap']!r} was asked for but the array was read into RAM"
    if not row["mmapped"] and n > 1 and (row["nbytes"] or 0) * n >= BIG_BYTES:
        return f"{name} ({size}) was loaded {n} times, each a full copy; load it once, or with mmap_mode='r'"
    if not row["mmapped"] and (row["nbytes"] or 0) >= BIG_BYTES:
        return f"{name} ({size}) is read into RAM whole; np.load(..., mmap_mode='r') maps it and pages it in as used"
    return None


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
            row = idx[lid] = {"id": lid, "pid": e["pid"], "how": None, "type": None, "d": None, "ntotal": 0,
                              "est_bytes": 0, "peak_est_bytes": 0, "serialized_bytes": None,
                              "serialized_ntotal": None, "alive": True, "created_s": round(e["t"], 3),
                              "freed_s": None, "children": [], "ptr": None, "gpu": False, "advice": None}
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
    return {"indexes": rows, "live_count": len(live), "live_est_bytes": sum(r["est_bytes"] or 0 for r in live),
            "peak_index_bytes": max((r["peak_est_bytes"] for r in rows), default=0),
            "advice": _top_advice(rows, "peak_est_bytes")}


def _top_advice(rows: list[dict[str, Any]], size_key: str) -> str | None:
    """The advice of the largest row that has one: the line analysis/advice.py lifts from a dict-valued key."""
    rows = [r for r in rows if r.get("advice")]
    return max(rows, key=lambda r: r.get(size_key) or 0)["advice"] if rows else None


def faiss_advice(r: dict[str, Any]) -> str | None:
    t, size = r.get("type") or "", r.get("peak_est_bytes") or 0
    if t in ("IndexFlat", "IndexFlatL2", "IndexFlatIP") and size >= FLAT_ADVICE_BYTES:
        return (f"{t} (d={r['d']}, {r['ntotal']:,} vectors) holds a full float32 copy of the vectors "
                f"({fmt_bytes(size, 'tenth')}); if they are also in a NumPy array that is twice; IVF+PQ "
                f"(faiss.index_factory({r['d']}, 'IVF4096,PQ{max(1, (r['d'] or 8) // 8)}')) holds ~30x less")
    return None


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
    return {"processes": rows, "free_held_bytes": sum(r.get("free_held_bytes") or 0 for r in rows),
            "advice": _top_advice(rows, "peak_free_held_bytes")}


def malloc_advice(r: dict[str, Any]) -> str | None:
    held, used = r.get("peak_free_held_bytes") or 0, r.get("in_use_bytes") or 0
    if held < HELD_ADVICE_BYTES or held < HELD_ADVICE_SHARE * (held + used):
        return None
    return (f"pid {r['pid']}: glibc held up to {fmt_bytes(held, 'tenth')} of freed memory without returning it to the kernel "
            f"({fmt_bytes(used, 'tenth')} in use at the end); call ctypes.CDLL('libc.so.6').malloc_trim(0) after the step that "
            f"frees it, or run with MALLOC_ARENA_MAX=2 / MALLOC_TRIM_THRESHOLD_=<bytes>")
