"""The NumPy probe's section of the summary (``loads``), from the agents' ``np_load`` and ``np_read`` events.

Pure: events in, summary key out (each row may carry an ``advice`` line; analysis/advice.py lifts them).
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from ...fmt import fmt_bytes

BIG_BYTES = 1 << 30  # a whole-array read this large is worth a line of advice by itself


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


def _row(path: str, key: str | None, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "path": path,
        "key": key,
        "shape": None,
        "dtype": None,
        "nbytes": None,
        "compressed": None,
        "requested_mmap": None,
        "mmapped": False,
        "reads": 0,
        "duration_s": 0.0,
        "rss_delta_bytes": None,
        "anon_delta_bytes": None,
        "file_delta_bytes": None,
        "advice": None,
    }
    row.update(kw)
    row["rss_delta_bytes"] = _sum(row["anon_delta_bytes"], row["file_delta_bytes"])
    return row


# (path, member key or None) -> the row of that file, or of that .npz member
_Rows = dict[tuple[str, "str | None"], dict[str, Any]]


def summarize_loads(
    load_events: Iterable[dict[str, Any]], read_events: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per .npy path, per .npz member read (or per .npz with no member read), per group of small loads."""
    opens, resident, groups = _index_loads(load_events)
    rows, read_ids = _member_rows(read_events)
    for load_id, d in opens.items():
        if d.get("kind") == "npz":
            _add_npz(rows, d, load_id in read_ids)
        else:
            _add_npy(rows, d, resident.get(load_id))
    for d in groups.values():
        _add_group(rows, d)
    out = list(rows.values())
    for row in out:
        row["duration_s"] = round(row["duration_s"], 6)
        row["advice"] = load_advice(row)
    return out


def _index_loads(
    load_events: Iterable[dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, int]], dict[tuple[int | None, str], dict[str, Any]]]:
    """The ``np_load`` events by kind: opens and memmaps' peak residency by load id, small-load groups."""
    opens: dict[str, dict[str, Any]] = {}  # load id -> the open message
    resident: dict[str, dict[str, int]] = {}  # load id -> peak residency of its memmap
    groups: dict[tuple[int | None, str], dict[str, Any]] = {}
    for e in load_events:
        d = e["data"]
        ev = d.get("ev")
        if ev == "open":
            opens[d["id"]] = d
        elif ev == "resident":
            r = resident.setdefault(d["id"], {"resident_bytes": 0, "resident_file_bytes": 0, "resident_anon_bytes": 0})
            r["resident_bytes"] = max(r["resident_bytes"], d.get("resident_bytes") or 0)
            r["resident_file_bytes"] = max(r["resident_file_bytes"], d.get("file_bytes") or 0)
            r["resident_anon_bytes"] = max(r["resident_anon_bytes"], d.get("anon_bytes") or 0)
        elif ev == "group":
            groups[(e["pid"], d["id"])] = d  # counts are cumulative per process: the last one holds
    return opens, resident, groups


def _member_rows(read_events: Iterable[dict[str, Any]]) -> tuple[_Rows, set[Any]]:
    """The rows of the .npz members read, and the load ids they were read from."""
    # Member reads: each message holds the running count of one (process, load, member); keep the last.
    last_read: dict[tuple[int | None, str, str], dict[str, Any]] = {}
    for e in read_events:
        d = e["data"]
        last_read[(e["pid"], d.get("id"), d.get("key"))] = dict(d, _t=e["t"])
    rows: _Rows = {}
    read_ids = set()
    for (pid, load_id, key), d in sorted(last_read.items(), key=lambda kv: kv[1]["_t"]):
        read_ids.add(load_id)
        k = (d.get("path") or "?", key)
        row = rows.get(k)
        if row is None:
            row = rows[k] = _row(
                k[0],
                key,
                shape=d.get("shape"),
                dtype=d.get("dtype"),
                nbytes=d.get("nbytes"),
                compressed=d.get("compressed"),
                requested_mmap=d.get("requested_mmap"),
                mmapped=False,
                reads=int(d.get("reads") or 0),
                duration_s=float(d.get("duration_s") or 0.0),
                anon_delta_bytes=d.get("anon_delta_bytes"),
                file_delta_bytes=d.get("file_delta_bytes"),
            )
        else:
            row["reads"] += int(d.get("reads") or 0)
            row["duration_s"] += float(d.get("duration_s") or 0.0)
            row["requested_mmap"] = row["requested_mmap"] or d.get("requested_mmap")
        opener = str(load_id or "").split("-")[0]
        if opener.isdigit() and pid is not None and int(opener) != pid:
            # an NpzFile opened in one process and read in its forked children
            row["shared_after_fork"] = sorted(set(row.get("shared_after_fork") or []) | {pid})
    return rows, read_ids


def _add_npz(rows: _Rows, d: dict[str, Any], members_read: bool) -> None:
    """An .npz opened: its own row when none of its members was read (else the members' rows say it)."""
    k = (d.get("path") or "?", None)
    if members_read or k in rows:
        return
    members = d.get("members") or []
    rows[k] = _row(
        k[0],
        None,
        nbytes=sum(int(m[1]) for m in members) if members else None,
        compressed=any(bool(m[2]) for m in members) if members else None,
        requested_mmap=d.get("requested_mmap"),
        mmapped=False,
        reads=0,
        duration_s=float(d.get("duration_s") or 0.0),
        anon_delta_bytes=d.get("anon_delta_bytes"),
        file_delta_bytes=d.get("file_delta_bytes"),
        members=[m[0] for m in members],
    )


def _add_npy(rows: _Rows, d: dict[str, Any], resident: dict[str, int] | None) -> None:
    """An .npy loaded (or memory-mapped, with its peak residency): one read more of its path's row."""
    k = (d.get("path") or "?", None)
    row = rows.get(k)
    if row is None:
        row = rows[k] = _row(
            k[0],
            None,
            shape=d.get("shape"),
            dtype=d.get("dtype"),
            nbytes=d.get("nbytes"),
            compressed=False,
            requested_mmap=d.get("requested_mmap"),
            mmapped=bool(d.get("mmapped")),
            reads=0,
            anon_delta_bytes=d.get("anon_delta_bytes"),
            file_delta_bytes=d.get("file_delta_bytes"),
        )
    row["reads"] += 1
    row["duration_s"] += float(d.get("duration_s") or 0.0)
    for name, v in (resident or {}).items():
        row[name] = max(row.get(name) or 0, v)


def _add_group(rows: _Rows, d: dict[str, Any]) -> None:
    """A group of small loads of one process (its last, cumulative count)."""
    k = (d.get("path") or "?", None)
    row = rows.get(k)
    if row is None:
        rows[k] = _row(
            k[0],
            None,
            dtype=d.get("dtype"),
            nbytes=int(d.get("nbytes") or 0),
            compressed=False,
            reads=int(d.get("count") or 0),
            duration_s=float(d.get("duration_s") or 0.0),
            small_files=True,
        )
    else:
        row["reads"] += int(d.get("count") or 0)
        row["nbytes"] = (row["nbytes"] or 0) + int(d.get("nbytes") or 0)
        row["duration_s"] += float(d.get("duration_s") or 0.0)


def load_advice(row: dict[str, Any]) -> str | None:
    """One actionable line where the row shows a cost the user can avoid, else None."""
    name = os.path.basename(row["path"])
    key, n, size = row["key"], row["reads"], fmt_bytes(row["nbytes"], "tenth")
    is_npz = name.endswith(".npz") or key is not None
    if row.get("small_files"):
        return None
    if is_npz and key is not None and row.get("shared_after_fork"):
        other = load_advice(dict(row, shared_after_fork=None))
        return (
            f"{name} was opened before a fork and read in {len(row['shared_after_fork'])} child processes "
            f"(DataLoader workers?): they share one file offset, so concurrent reads can fail (BadZipFile, "
            f"EOFError) or return wrong data; open it in each worker (lazily in __getitem__)"
            + (f". Also: {other}" if other else "")
        )
    if is_npz and key is not None:
        redo = "reads and decompresses" if row.get("compressed") else "reads"
        if row["requested_mmap"]:
            times = f" (read {n} times)" if n > 1 else ""
            return (
                f"{name}: mmap_mode is ignored for .npz; {key} ({size}) is read into RAM on every "
                f"access{times}; save it with np.save and load it with mmap_mode='r'"
            )
        if n > 1:
            return (
                f"{name}: {key} ({size}) was read {n} times; each data['{key}'] {redo} the whole array "
                f"again; read it once (x = data['{key}']) and index x"
            )
        if (row["nbytes"] or 0) >= BIG_BYTES:
            return (
                f"{name}: {key} ({size}) is read into RAM whole; save it with np.save and load it with "
                f"mmap_mode='r' to page it in only as it is used"
            )
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


def summarize(events: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The section from the probe's events by kind (the registry's entry point)."""
    return summarize_loads(events.get("np_load", []), events.get("np_read", []))
