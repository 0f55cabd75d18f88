"""What a DataLoader worker's Dataset holds in Python objects, sent once per worker as a ``dataset_objects`` message:
the words that name a copy-on-read ("`annotations`: list of 3,000,000 dict, ~0.9 GiB").

It attaches when the user's code imports torch's DataLoader (never importing torch itself) and checks on the probes'
thread, every CHECK_S, whether this process has become a DataLoader worker (``get_worker_info()`` is set there);
once it has, it looks at ``get_worker_info().dataset``'s attributes (and those of a Dataset it wraps: a Subset's
``dataset``) and sends the largest holders of Python objects. Cheap and bounded, because the worker must not stall:
a container's length is read, its size estimated from at most SAMPLE of its items (``sys.getsizeof``, one level
down), never by walking it; the whole look stops after BUDGET_S.
"""
from __future__ import annotations

import itertools
import os
import sys
import time

from . import every

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the agent's start 2 ms in every process: only for mypy
    from typing import Any

CHECK_S = 1.0           # how often a process checks whether it has become a DataLoader worker (one global read)
SAMPLE = 64             # items of a container measured to estimate its size
INNER = 16              # items of a sampled item measured (a dict's values, a tuple's members)
BUDGET_S = 0.02         # the most the look may take, wall clock
MAX_ATTRS = 200         # attributes looked at
MAX_ROWS = 8            # attributes sent, largest first
NAME_CHARS = 120

_channel: Any = None
_worker: list[Any] = [None]  # torch.utils.data._utils.worker, once imported
_sent = [False]
_started = [False]
_CONTAINERS = (list, tuple, dict, set, frozenset)


def _check() -> None:
    mod = _worker[0]
    if _sent[0] or mod is None:
        return
    info = getattr(mod, "_worker_info", None)  # get_worker_info() without its call: None outside a worker
    if info is None:
        return
    _sent[0] = True
    ch = _channel
    if ch is not None:
        ch.send(report(info))


def report(info: Any) -> dict[str, Any]:
    """The ``dataset_objects`` message for a worker's ``WorkerInfo`` (any object with ``dataset``)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    ds = getattr(info, "dataset", None)
    rows, truncated = census(ds, t0 + BUDGET_S)
    return {"t": "dataset_objects", "pid": os.getpid(), "dataset": type(ds).__name__[:NAME_CHARS],
            "worker_id": _int(getattr(info, "id", None)), "num_workers": _int(getattr(info, "num_workers", None)),
            "attributes": rows, "truncated": truncated,
            "duration_s": max(0.0, time.perf_counter() - t0), "cpu_s": max(0.0, time.thread_time() - c0)}


def _int(v: Any) -> int | None:
    return v if type(v) is int else None


def census(obj: Any, deadline: float) -> tuple[list[dict[str, Any]], bool]:
    """(rows, truncated): the attributes of ``obj`` (and of a Dataset it wraps) that hold most, largest first."""
    rows: list[dict[str, Any]] = []
    truncated = _walk(obj, "", rows, deadline, 0, set())
    rows.sort(key=lambda r: (r["python_objects"], r.get("bytes") or 0), reverse=True)
    return rows[:MAX_ROWS], truncated or len(rows) > MAX_ROWS


def _walk(obj: Any, prefix: str, rows: list[dict[str, Any]], deadline: float, depth: int, seen: set[int]) -> bool:
    try:
        items = list(vars(obj).items())  # a snapshot: the worker's own thread may add attributes meanwhile
    except TypeError:
        return False
    seen.add(id(obj))
    for name, value in items[:MAX_ATTRS]:
        if time.perf_counter() > deadline:
            return True
        if id(value) in seen or not isinstance(name, str):
            continue
        full = (prefix + name)[:NAME_CHARS]
        try:
            row = measure(value)
        except Exception:
            continue  # a user's object whose len() or size raises: left out
        if row is not None:
            rows.append(dict(row, name=full))
        elif depth < 2 and _wrapped_dataset(value):
            if _walk(value, full + ".", rows, deadline, depth + 1, seen):
                return True
    return len(items) > MAX_ATTRS


def _wrapped_dataset(value: Any) -> bool:
    # A Dataset inside the Dataset (Subset.dataset, a user's wrapper): an instance with __getitem__ and attributes.
    t = type(value)
    return hasattr(t, "__getitem__") and hasattr(value, "__dict__") and not isinstance(value, type) and \
        t.__module__ not in ("builtins", "types")


def measure(value: Any) -> dict[str, Any] | None:
    """{type, len, item_type, objects, bytes, python_objects} of one attribute's value; None where it holds
    little by itself (a number, a function, a nested object looked at on its own)."""
    if isinstance(value, _CONTAINERS) or type(value).__name__ == "deque":
        return _container(value)
    dtype = getattr(type(value), "dtype", None) and getattr(value, "dtype", None)
    nbytes = getattr(value, "nbytes", None) if dtype is not None else None
    if isinstance(nbytes, int):  # a numpy array or a tensor: one buffer, unless it holds Python objects
        size = getattr(value, "size", None)
        objects = str(dtype) == "object" and isinstance(size, int)
        row: dict[str, Any] = {"type": type(value).__name__[:NAME_CHARS], "len": _len(value), "item_type": str(dtype)[:NAME_CHARS],
               "objects": size if objects else 1, "bytes": nbytes, "python_objects": objects}
        if objects and size:
            flat = value.ravel() if hasattr(value, "ravel") else None
            if flat is not None:
                sample = [flat[(i * size) // min(SAMPLE, size)] for i in range(min(SAMPLE, size))]
                row["bytes"] = nbytes + size * sum(map(sys.getsizeof, sample)) // len(sample)
        return row
    if isinstance(value, (str, bytes, bytearray)) and len(value) >= 1 << 16:
        return {"type": type(value).__name__, "len": len(value), "item_type": None, "objects": 1,
                "bytes": sys.getsizeof(value), "python_objects": False}
    return None


def _len(value: Any) -> int | None:
    try:
        n = len(value)
    except Exception:
        return None
    return n if type(n) is int and n >= 0 else None


def _container(c: Any) -> dict[str, Any]:
    n = len(c)
    if isinstance(c, (list, tuple)):
        m = min(n, SAMPLE)
        sample = [c[i * n // m] for i in range(m)]  # spread over the whole: the items built last may differ
    elif isinstance(c, dict):
        # A dict's items in order from its start (no index into a dict): values are what it holds.
        sample = list(itertools.islice(c.values(), SAMPLE))
    else:
        sample = list(itertools.islice(c, SAMPLE))
    sizes, objs, kinds = 0, 0, {}  # type: tuple[int, int, dict[str, int]]
    for x in sample:
        b, o = _item(x)
        sizes += b
        objs += o
        k = type(x).__name__
        kinds[k] = kinds.get(k, 0) + 1
    m = len(sample) or 1
    item_type = max(kinds, key=lambda k: kinds[k])[:NAME_CHARS] if kinds else None
    return {"type": type(c).__name__[:NAME_CHARS], "len": n, "item_type": item_type,
            "objects": 1 + n * objs // m, "bytes": sys.getsizeof(c) + n * sizes // m,
            "python_objects": n > 0}


def _item(x: Any) -> tuple[int, int]:
    """(bytes, objects) of one item, one level down: a dict's values, a list's or tuple's members."""
    b, o = sys.getsizeof(x), 1
    if isinstance(x, dict):
        inner = list(itertools.islice(x.values(), INNER))
        scale = len(x) / len(inner) if inner else 0
    elif isinstance(x, (list, tuple)):
        inner = list(x[:INNER])
        scale = len(x) / len(inner) if inner else 0
    else:
        return b, o
    ib = sum(sys.getsizeof(v) for v in inner if not _shared(v))
    io = sum(1 for v in inner if not _shared(v))
    return b + int(ib * scale), o + int(io * scale)


def _shared(v: Any) -> bool:
    # One object for the whole process: writing its count copies one page, not one per item.
    return v is None or v is True or v is False or (type(v) is int and -5 <= v <= 256)


def _start(mod: Any) -> None:
    if _started[0]:
        return
    _started[0] = True
    _worker[0] = mod
    every(CHECK_S, _check)
    os.register_at_fork(after_in_child=_after_fork)


def _after_fork() -> None:
    _sent[0] = False  # a worker forked from a worker (or from the main) reports its own Dataset


def install(channel: Any) -> None:
    """Report a DataLoader worker's Dataset once, on the probes' thread, when torch's DataLoader is imported."""
    global _channel
    _channel = channel
    from ..hooks import when_imported
    when_imported("torch.utils.data._utils.worker", _start)
