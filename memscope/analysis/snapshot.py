"""A PyTorch CUDA memory snapshot, read safely and summarised: pure functions, no torch, no device.

A snapshot is what ``torch.cuda.memory._snapshot()`` returns and ``torch.cuda.memory._dump_snapshot()`` pickles
(and what memscope saves at a CUDA OOM): ``segments`` (each cudaMalloc'd block of device memory, split into the
blocks the allocator handed out or holds free) and ``device_traces`` (with history recording on, the allocations
and frees that led there). Two formats exist: since PyTorch 2.1 blocks carry ``address`` and ``frames``; before,
blocks carry a ``history`` list whose entries hold the ``frames``, and trace entries have no ``time_us``.

The file comes from outside, so it is read with an unpickler that builds only plain containers and scalars: a
pickle that names any global (a class, a function such as ``os.system``) is refused before anything runs.
"""

from __future__ import annotations

import io
import math
import pickle
from typing import Any, Iterable, Mapping

from ..fmt import fmt_bytes

SCHEMA = "memscope.snapshot/1"
MiB, GiB = 1 << 20, 1 << 30
MAX_BYTES = 1 << 30  # a snapshot pickle larger than this is refused (a memory-viz trace is megabytes)
# Reserved-but-unallocated memory worth a word: this share of what PyTorch reserved, and at least this much.
CACHE_FRACTION = 0.25
CACHE_BYTES = 512 * MiB
# "Reserved ≈ allocated": what the cache holds free is below this share of reserved (or this many bytes).
SHORTAGE_FRACTION = 0.05
SHORTAGE_BYTES = 64 * MiB
# The free memory is "in pieces" when the largest free block is under this share of all that is free.
PIECES_FRACTION = 0.5
_ALLOC_DELTA = {"alloc": 1, "free_completed": -1}
_SEGMENT_DELTA = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


class SnapshotError(ValueError):
    """The file is not a snapshot memscope can read; the message is one line meant for the user."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, sets, strings, bytes and numbers only: every global is refused, so no
    constructor, no ``__reduce__`` callable and no ``__setstate__`` of the file's choosing can run."""

    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotError(
            f"refused: the pickle names {module}.{name}, and a memory snapshot holds only plain "
            "data (dicts, lists, strings, numbers); nothing in it was run"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise SnapshotError("refused: the pickle asks for a persistent object; a memory snapshot holds only plain data")


def loads(data: bytes) -> dict[str, Any]:
    """A snapshot from pickled bytes (see ``load``)."""
    try:
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except RecursionError:
        raise SnapshotError("not a memory snapshot: the pickle nests too deep") from None
    except Exception as exc:  # UnpicklingError, EOFError, ValueError... from a file that is not a pickle
        raise SnapshotError(f"not a pickle memscope can read ({type(exc).__name__}: {str(exc)[:120]})") from None
    return _check(obj)


def load(path: str) -> dict[str, Any]:
    """Read a snapshot pickle safely; raises ``SnapshotError`` (one line) for anything else."""
    import os

    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise SnapshotError(f"{path}: {size / GiB:.1f} GiB is too large for a memory snapshot")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SnapshotError(f"{path}: {exc.strerror or exc}") from None
    try:
        return loads(data)
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from None


# Bounds on what a snapshot may hold, counted as memscope walks it (a container the pickle references twice counts
# twice: a "billion laughs" pickle of a few MB names the same list millions of times over, and is refused at once).
# Real ones are far below: 216 segments and 2,400 blocks for a transformer's step, a history of 100,000 trace
# entries by default (``max_entries``), stacks of tens of frames.
MAX_SEGMENTS = 200_000
MAX_BLOCKS = 2_000_000  # over all segments
MAX_TRACE = 5_000_000  # trace entries over all devices
MAX_FRAMES = 1_000  # frames of one stack
MAX_BLOCK_FRAMES = 5_000_000  # frames over all blocks (each block's stack is read for the page)
MAX_INT = (1 << 64) - 1  # sizes and addresses are 64-bit
_OOM_KEYS = ("device", "alloc_bytes", "device_free", "device_total")


def _check(obj: Any) -> dict[str, Any]:
    """``obj`` if it is a snapshot memscope can read in full: every field memscope reads of the type it must be,
    within the bounds above; SnapshotError (one line) for anything else."""
    if isinstance(obj, list):  # torch.cuda.memory_snapshot() returns the segments alone
        obj = {"segments": obj, "device_traces": []}
    if not isinstance(obj, dict) or not isinstance(obj.get("segments"), list):
        raise SnapshotError(
            "not a CUDA memory snapshot: no 'segments' list (write one with torch.cuda.memory._dump_snapshot(path))"
        )
    _Checker().snapshot(obj)
    return obj


class _Checker:
    """One walk over an untrusted snapshot, with counts; a stack shared in the file is checked once."""

    def __init__(self) -> None:
        self.blocks = self.trace = self.block_frames = 0
        self._stacks: set[int] = set()

    def snapshot(self, obj: dict[str, Any]) -> None:
        segs = obj["segments"]
        if len(segs) > MAX_SEGMENTS:
            raise SnapshotError(f"refused: {len(segs)} segments (a memory snapshot has at most {MAX_SEGMENTS})")
        for i, sg in enumerate(segs):
            self.segment(i, sg)
        traces = obj.get("device_traces")
        if traces is not None:
            if not (isinstance(traces, list) and all(isinstance(t, list) for t in traces)):
                raise SnapshotError("not a CUDA memory snapshot: 'device_traces' is not a list of lists")
            for d, t in enumerate(traces):
                for i, e in enumerate(t):
                    self.event(d, i, e)
        oom = obj.get("memscope_oom")
        if isinstance(oom, dict):
            for k in _OOM_KEYS:
                _int(oom.get(k), f"memscope_oom's {k!r}")

    def segment(self, i: int, sg: Any) -> None:
        where = f"segment {i}"
        if not isinstance(sg, dict) or not isinstance(sg.get("blocks", []), list):
            raise SnapshotError(f"not a CUDA memory snapshot: {where} is not a dict with 'total_size' and 'blocks'")
        for k in ("device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream"):
            _int(sg.get(k), f"{where}'s {k!r}")
        _str(sg.get("segment_type"), f"{where}'s 'segment_type'")
        blocks = sg.get("blocks") or []
        self.blocks += len(blocks)
        if self.blocks > MAX_BLOCKS:
            raise SnapshotError(f"refused: more than {MAX_BLOCKS} blocks (a pickle that repeats its lists?)")
        for j, b in enumerate(blocks):
            self.block(f"{where}, block {j}", b)

    def block(self, where: str, b: Any) -> None:
        if not isinstance(b, dict):
            raise SnapshotError(f"not a CUDA memory snapshot: {where} is a {type(b).__name__}, not a dict")
        for k in ("size", "requested_size", "address"):
            _int(b.get(k), f"{where}'s {k!r}")
        _str(b.get("state"), f"{where}'s 'state'")
        frames = b.get("frames")
        if not frames:  # before PyTorch 2.1: the stack is in the block's last history entry
            hist = b.get("history")
            if hist is not None and not isinstance(hist, list):
                raise SnapshotError(f"not a CUDA memory snapshot: {where}'s 'history' is not a list")
            if hist and isinstance(hist[-1], dict):
                frames = hist[-1].get("frames")
        self.block_frames += self.stack(where, frames)
        if self.block_frames > MAX_BLOCK_FRAMES:
            raise SnapshotError(f"refused: more than {MAX_BLOCK_FRAMES} frames in the blocks' stacks")

    def event(self, device: int, i: int, e: Any) -> None:
        self.trace += 1
        if self.trace > MAX_TRACE:
            raise SnapshotError(f"refused: more than {MAX_TRACE} trace entries")
        where = f"trace entry {i} of device {device}"
        if not isinstance(e, dict):
            raise SnapshotError(f"not a CUDA memory snapshot: {where} is a {type(e).__name__}, not a dict")
        for k in ("addr", "size", "stream"):
            _int(e.get(k), f"{where}'s {k!r}")
        _str(e.get("action"), f"{where}'s 'action'")
        t = e.get("time_us")
        if t is not None and not ((type(t) is int and abs(t) <= MAX_INT) or (type(t) is float and math.isfinite(t))):
            raise SnapshotError(f"not a CUDA memory snapshot: {where}'s 'time_us' is not a finite number")
        self.stack(where, e.get("frames"))

    def stack(self, where: str, frames: Any) -> int:
        """Check a stack (once per list object); returns its length."""
        if not frames:
            return 0
        if not isinstance(frames, list):
            raise SnapshotError(f"not a CUDA memory snapshot: {where}'s frames are not a list")
        if id(frames) in self._stacks:
            return len(frames)
        if len(frames) > MAX_FRAMES:
            raise SnapshotError(f"refused: {where} has a stack of {len(frames)} frames (at most {MAX_FRAMES})")
        for f in frames:
            if not isinstance(f, dict):
                raise SnapshotError(f"not a CUDA memory snapshot: a frame of {where} is not a dict")
            _str(f.get("filename"), f"a frame's 'filename' in {where}")
            _str(f.get("name"), f"a frame's 'name' in {where}")
            _int(f.get("line"), f"a frame's 'line' in {where}")
        self._stacks.add(id(frames))  # ``frames`` stays alive (in the file's object) while this walk goes
        return len(frames)


def _int(v: Any, what: str) -> None:
    """A whole number of 0 to 2**64 - 1 (sizes, addresses, devices, lines), or None (absent)."""
    if v is not None and (type(v) is not int or not 0 <= v <= MAX_INT):
        shown = repr(v) if isinstance(v, (int, float)) else type(v).__name__
        raise SnapshotError(f"not a CUDA memory snapshot: {what} is {shown[:40]}, not a whole number of 0 or more")


def _str(v: Any, what: str) -> None:
    if v is not None and type(v) is not str:
        raise SnapshotError(f"not a CUDA memory snapshot: {what} is a {type(v).__name__}, not a string")


# -- per device --------------------------------------------------------------------------------------------------
def device_ids(snap: Mapping[str, Any]) -> list[int]:
    """Devices with segments or trace events, in order."""
    ids = {int(s.get("device") or 0) for s in snap.get("segments") or []}
    ids |= {i for i, t in enumerate(snap.get("device_traces") or []) if t}
    return sorted(ids)


def _segments(snap: Mapping[str, Any], device: int) -> list[Mapping[str, Any]]:
    return [s for s in snap.get("segments") or [] if int(s.get("device") or 0) == device]


def _trace(snap: Mapping[str, Any], device: int) -> list[Mapping[str, Any]]:
    traces = snap.get("device_traces") or []
    return [e for e in traces[device] if isinstance(e, dict)] if device < len(traces) else []


def _free_blocks(segments: Iterable[Mapping[str, Any]]) -> list[int]:
    return [int(b.get("size") or 0) for s in segments for b in s.get("blocks") or [] if b.get("state") == "inactive"]


def device_summary(snap: Mapping[str, Any], device: int) -> dict[str, Any]:
    """The schema's per-device numbers: direct sums over the device's segments and blocks."""
    segs = _segments(snap, device)
    free = _free_blocks(segs)
    return {
        "device": device,
        "reserved_bytes": sum(int(s.get("total_size") or 0) for s in segs),
        "allocated_bytes": sum(int(s.get("allocated_size") or 0) for s in segs),
        "active_bytes": sum(int(s.get("active_size") or 0) for s in segs),
        "free_in_segments_bytes": sum(free),
        "largest_free_block_bytes": max(free, default=0),
        "segments": len(segs),
        "trace_events": len(_trace(snap, device)),
    }


def allocator_stats(snap: Mapping[str, Any], device: int) -> dict[str, int]:
    """The agent's ``torch_alloc`` fields (``torch.cuda.memory_stats`` names, see agent/probes/torch_memory.py) as
    the snapshot's segments give them: ``inactive_split`` is the free memory in segments that also hold live
    blocks (what ``inactive_split_bytes`` counts), unlike whole free segments the cache could release."""
    segs = _segments(snap, device)
    split = sum(
        int(b.get("size") or 0)
        for s in segs
        if len(s.get("blocks") or []) > 1
        for b in s.get("blocks") or []
        if b.get("state") == "inactive"
    )
    return {
        "allocated": sum(int(s.get("allocated_size") or 0) for s in segs),
        "reserved": sum(int(s.get("total_size") or 0) for s in segs),
        "active": sum(int(s.get("active_size") or 0) for s in segs),
        "requested": sum(int(s.get("requested_size") or 0) for s in segs),
        "inactive_split": split,
    }


def timeline(snap: Mapping[str, Any], device: int) -> dict[str, Any]:
    """Allocated and reserved bytes after each trace event. The trace may start long after the process did, so the
    walk goes backwards from the state the segments show at the end. ``x`` is seconds since the first event where
    the trace has ``time_us`` (PyTorch 2.1+), else the event's number."""
    trace = _trace(snap, device)
    end = device_summary(snap, device)
    alloc, reserved = end["allocated_bytes"], end["reserved_bytes"]
    a_rev, r_rev = [alloc], [reserved]
    for e in reversed(trace):
        size = int(e.get("size") or 0)
        alloc -= _ALLOC_DELTA.get(str(e.get("action")), 0) * size
        reserved -= _SEGMENT_DELTA.get(str(e.get("action")), 0) * size
        a_rev.append(alloc)
        r_rev.append(reserved)
    a_rev.reverse()
    r_rev.reverse()
    times = [e.get("time_us") for e in trace]
    if trace and all(isinstance(t, (int, float)) for t in times):
        t0 = float(times[0])  # type: ignore[arg-type]
        x = [0.0] + [(float(t) - t0) / 1e6 for t in times]  # type: ignore[arg-type]
        unit = "s"
    else:
        x = [float(i) for i in range(len(trace) + 1)]
        unit = "event"
    # Point 0 is the state before the first event.
    return {
        "x": x,
        "allocated": a_rev,
        "reserved": r_rev,
        "unit": unit,
        "peak_allocated_bytes": max(a_rev),
        "peak_reserved_bytes": max(r_rev),
        # An ``oom`` entry's size is the allocation that failed (its addr, the device's free bytes).
        "ooms": [
            {"at": x[i + 1], "alloc_bytes": int(e.get("size") or 0)}
            for i, e in enumerate(trace)
            if e.get("action") == "oom"
        ],
    }


def block_frames(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Python frames where a block was allocated: ``frames`` (2.1+) or its last ``history`` entry's (older)."""
    frames = block.get("frames")
    if not frames:
        hist = block.get("history") or []
        frames = (hist[-1] or {}).get("frames") if hist and isinstance(hist[-1], dict) else None
    return [f for f in frames or [] if isinstance(f, dict)]


def segment_layout(snap: Mapping[str, Any], device: int) -> list[dict[str, Any]]:
    """Each segment with its blocks as (offset, size, state), largest segment first."""
    out: list[dict[str, Any]] = []
    for s in _segments(snap, device):
        base = s.get("address")
        off, blocks = 0, []
        for b in s.get("blocks") or []:
            size = int(b.get("size") or 0)
            addr = b.get("address")
            start = int(addr) - int(base) if isinstance(addr, int) and isinstance(base, int) else off
            blocks.append({"offset": start, "size": size, "state": str(b.get("state") or "")})
            off = start + size
        out.append(
            {
                "address": base,
                "total_size": int(s.get("total_size") or 0),
                "allocated_size": int(s.get("allocated_size") or 0),
                "segment_type": s.get("segment_type"),
                "stream": s.get("stream"),
                "blocks": blocks,
            }
        )
    out.sort(key=lambda s: (-s["total_size"], s["address"] if isinstance(s["address"], int) else 0))
    return out


def largest_allocations(snap: Mapping[str, Any], device: int, n: int = 12) -> list[dict[str, Any]]:
    """The ``n`` largest live blocks with the frames that allocated them (from the trace's last ``alloc`` at that
    address when the block itself carries none)."""
    blocks = [
        (b, s)
        for s in _segments(snap, device)
        for b in s.get("blocks") or []
        if str(b.get("state") or "").startswith("active")
    ]
    blocks.sort(key=lambda bs: -int(bs[0].get("size") or 0))
    top = blocks[:n]
    by_addr: dict[int, list[dict[str, Any]]] = {}
    want = {b.get("address") for b, _ in top if not block_frames(b)}
    if want - {None}:
        for e in _trace(snap, device):
            if e.get("action") == "alloc" and e.get("addr") in want and e.get("frames"):
                by_addr[int(e["addr"])] = [f for f in e["frames"] if isinstance(f, dict)]
    out = []
    for b, s in top:
        frames = block_frames(b) or by_addr.get(b.get("address"), [])
        out.append(
            {
                "size": int(b.get("size") or 0),
                "requested_size": b.get("requested_size"),
                "state": b.get("state"),
                "segment_type": s.get("segment_type"),
                "frames": [
                    {"name": str(f.get("name", "")), "filename": str(f.get("filename", "")), "line": f.get("line")}
                    for f in frames
                ],
            }
        )
    return out


def user_frames(frames: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Frames outside torch and the standard library (the user's code), or all of them if none is."""

    def internal(f: Mapping[str, Any]) -> bool:
        name = str(f.get("filename", "")).replace("\\", "/")
        low = name.lower()
        return (
            "/torch/" in low
            or "/site-packages/" in low
            or "/lib/python" in low
            or name.startswith("<")
            or "/runpy.py" in name
            or name == "??"
        )

    own = [f for f in frames if not internal(f)]
    return own or list(frames)


# -- advice -----------------------------------------------------------------------------------------------------
def _fmt(n: float | None) -> str:
    return fmt_bytes(n, "torch")


def oom_info(snap: Mapping[str, Any]) -> dict[str, Any] | None:
    """What memscope's OOM observer wrote into the snapshot it saved (``memscope_oom``), or None."""
    info = snap.get("memscope_oom")
    return dict(info) if isinstance(info, dict) else None


def device_advice(
    d: Mapping[str, Any],
    tl: Mapping[str, Any] | None = None,
    oom: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[str]:
    """Fragmentation or cache vs a real shortage, from one device's numbers (``device_summary``), its
    ``timeline`` and the OOM (``memscope_oom``: ``alloc_bytes`` tried) where known."""
    reserved, allocated = d["reserved_bytes"], d["allocated_bytes"]
    free, largest = d["free_in_segments_bytes"], d["largest_free_block_bytes"]
    if reserved <= 0:
        return []
    where = f"cuda:{d['device']}"
    if oom and oom.get("device", d["device"]) != d["device"]:
        oom = None
    trace_ooms = (tl or {}).get("ooms") or []
    tried = int((oom or {}).get("alloc_bytes") or (trace_ooms[-1]["alloc_bytes"] if trace_ooms else 0))
    at_oom = bool(oom) or bool(trace_ooms)
    out: list[str] = []
    expandable = bool((settings or {}).get("expandable_segments"))
    if free <= max(SHORTAGE_FRACTION * reserved, SHORTAGE_BYTES) and (not tried or tried > free):
        when = "this OOM is" if at_oom else "an OOM here would be"
        out.append(
            f"{where}: {_fmt(allocated)} of the {_fmt(reserved)} PyTorch reserved is allocated to tensors and its "
            f"cache holds only {_fmt(free)} free: the memory is really in use, so {when} a real shortage, not "
            "fragmentation (expandable_segments or empty_cache would not help). Lower the batch size, "
            "use activation checkpointing, and .detach() (or .item()) what you keep between steps: a list of "
            "outputs or attention maps kept with their autograd graph holds every activation behind them."
        )
        return out
    unused = reserved - allocated
    if unused >= CACHE_BYTES and unused >= CACHE_FRACTION * reserved:
        pieces = d.get("free_blocks")
        count = f" ({pieces} free blocks)" if pieces else ""
        peak = (tl or {}).get("peak_allocated_bytes") or 0
        peak_note = (
            f" The trace peaked at {_fmt(peak)} allocated: the cache is what that peak needed, kept for reuse."
            if peak > allocated + unused // 2
            else ""
        )
        fix = (
            "expandable_segments is already on; "
            if expandable
            else "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the allocator grow segments instead of "
            "splitting them; "
        )
        if tried and largest < tried <= free:
            out.append(
                f"{where}: the OOM's allocation of {_fmt(tried)} would have fit in the {_fmt(free)} free in "
                f"PyTorch's cache, but the largest free block is {_fmt(largest)}: fragmentation caused this "
                f"OOM. {fix}a steadier batch shape helps too."
            )
        elif largest < PIECES_FRACTION * free:
            out.append(
                f"{where}: PyTorch reserved {_fmt(reserved)} but only {_fmt(allocated)} is allocated; the "
                f"{_fmt(free)} free in its cache is in pieces{count}, the largest {_fmt(largest)}, so a "
                f"larger request needs a new cudaMalloc (fragmentation/cache).{peak_note} {fix}"
                "torch.cuda.empty_cache() returns the cache to the device when other processes on this GPU "
                "need it."
            )
        else:
            out.append(
                f"{where}: PyTorch reserved {_fmt(reserved)} but only {_fmt(allocated)} is allocated: "
                f"{_fmt(free)} is cached free (largest block {_fmt(largest)}), kept for reuse, not lost."
                f"{peak_note} torch.cuda.empty_cache() returns it to the device when other processes on "
                "this GPU need it."
            )
    return out


def summarize(snap: Mapping[str, Any]) -> dict[str, Any]:
    """``{"schema": "memscope.snapshot/1", "devices": [...], "advice": [...]}``."""
    devices, advice = [], []
    oom = oom_info(snap)
    settings = snap.get("allocator_settings") if isinstance(snap.get("allocator_settings"), dict) else None
    for dev in device_ids(snap):
        d = device_summary(snap, dev)
        devices.append(d)
        extra = dict(d, free_blocks=len(_free_blocks(_segments(snap, dev))))
        advice += device_advice(extra, timeline(snap, dev), oom, settings)
    return {"schema": SCHEMA, "devices": devices, "advice": advice}
