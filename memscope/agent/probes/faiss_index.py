"""FAISS indexes: every live index however it was made, with its size, sent as ``faiss_index`` messages.

Seen: constructors of every Index/IndexBinary class, index_factory, read_index, deserialize_index, clone_index
and the CPU<->GPU copies where faiss has them. ``add``/``add_with_ids`` report the new ntotal from the user's
own thread (at most once a second per index, so a loop of small adds costs ~1 us each); every 2 s and at exit the
probes' thread reads each live index's ntotal and reports what changed unreported (e.g. a quantizer trained).

Size: an estimate from the index's own structure (codes = code_size x ntotal; IVF adds 8-byte ids per vector and
its quantizer; HNSW adds its link lists; IDMap its id map; PreTransform/Refine their parts). The exact serialized
size is recorded only when it is free: the user's own write_index/serialize_index, read_index of a file,
deserialize_index. The probe never serializes an index itself: that costs a full pass over it, and from another
thread it would race with the user's add(). ``faiss.get_mem_usage_kb()`` is the process RSS, not an index:
never used here.
"""
from __future__ import annotations

import atexit
import os
import threading
import time
import weakref

from . import every

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Optional, TypedDict

    from ..channel import Channel

    class _Live(TypedDict):
        ref: weakref.ref[Any]  # the index (a faiss SWIG object)
        how: str  # what made it: a constructor, index_factory, read_index, ...
        ptr: Optional[int]  # its C++ pointer
        at: float  # when it was last reported (monotonic)
        dirty: bool  # an add() since then was not reported
        ntotal: Optional[int]  # its size last seen

REPORT_S = 1.0
_channel: Channel | None = None
_lock = threading.Lock()
_live: dict[str, _Live] = {}  # id -> what is known of the live index
_by_ptr: dict[int | None, str] = {}  # C++ pointer -> id (for serialized sizes and parent/child links); never None
_next = [0]
_faiss: Any = None  # the user's faiss module, once imported (Any: faiss has no types; the agent never imports it)
_inside = threading.local()   # >0 while in a wrapped faiss function: what it makes inside is its result
_exiting = [False]            # at exit, indexes freed by the interpreter's teardown are not "freed" by the user


def _send(msg: dict[str, Any]) -> None:
    ch = _channel
    if ch is not None:
        msg["t"] = "faiss_index"
        msg["pid"] = os.getpid()
        ch.send(msg)


def _ptr(idx: Any) -> int | None:
    try:
        return int(idx.this)
    except Exception:
        return None


def _cast(idx: Any) -> Any:
    f = _faiss
    try:
        if isinstance(idx, f.IndexBinary):
            return f.downcast_IndexBinary(idx)
        return f.downcast_index(idx)
    except Exception:
        return idx


def estimate(idx: Any, depth: int = 0) -> tuple[int, list[int]]:
    """(bytes, [child pointers]) of an index: what its own structures hold in RAM, from sizes only."""
    f = _faiss
    if idx is None or depth > 8:
        return 0, []
    idx = _cast(idx)
    n = int(idx.ntotal)
    kids: list[int] = []

    def sub(child: Any) -> int:
        p = _ptr(child)
        if p is not None:
            kids.append(p)
        b, _ = estimate(child, depth + 1)
        return b

    if isinstance(idx, f.IndexIVF) or (hasattr(f, "IndexBinaryIVF") and isinstance(idx, f.IndexBinaryIVF)):
        total = n * (int(idx.code_size) + 8) + sub(idx.quantizer)
        pq = getattr(idx, "pq", None)
        if pq is not None:
            total += int(pq.centroids.size()) * 4
        table = getattr(idx, "precomputed_table", None)
        if table is not None:
            total += int(table.size()) * 4
        return total, kids
    if isinstance(idx, f.IndexHNSW) or (hasattr(f, "IndexBinaryHNSW") and isinstance(idx, f.IndexBinaryHNSW)):
        h = idx.hnsw
        links = int(h.neighbors.size()) * 4 + int(h.offsets.size()) * 8 + int(h.levels.size()) * 4
        return links + sub(idx.storage), kids
    if isinstance(idx, f.IndexIDMap):
        extra = n * 40 if isinstance(idx, f.IndexIDMap2) else 0  # IDMap2's reverse hash map, about 40 B/entry
        return n * 8 + extra + sub(idx.index), kids
    if isinstance(idx, f.IndexPreTransform):
        total = sub(idx.index)
        try:
            for i in range(idx.chain.size()):
                vt = f.downcast_VectorTransform(idx.chain.at(i))
                if isinstance(vt, f.LinearTransform):
                    total += (int(vt.A.size()) + int(vt.b.size())) * 4
        except Exception:
            pass
        return total, kids
    if isinstance(idx, f.IndexRefine):
        return sub(idx.base_index) + sub(idx.refine_index), kids
    code = getattr(idx, "code_size", None)
    if code is not None:
        return n * int(code), kids
    try:
        return n * int(idx.sa_code_size()), kids
    except Exception:
        return n * int(idx.d) * 4, kids  # unknown layout: as if flat float32


def _state(idx: Any) -> dict[str, Any]:
    c = _cast(idx)
    est, kids = estimate(c)
    return {"type": type(c).__name__, "d": int(c.d), "ntotal": int(c.ntotal), "est_bytes": int(est),
            "children": kids, "binary": isinstance(c, _faiss.IndexBinary),
            "gpu": type(c).__name__.startswith("Gpu")}  # faiss-gpu: its data is in GPU memory, not host RAM


def _track(idx: Any, how: str, serialized: int | None = None) -> None:
    if idx is None or not hasattr(idx, "ntotal"):
        return
    ptr = _ptr(idx)
    with _lock:
        _next[0] += 1
        lid = "%d-%d" % (os.getpid(), _next[0])
        try:
            ref = weakref.ref(idx, lambda _r, lid=lid: _freed(lid))  # type: ignore[misc]
        except TypeError:
            return
        # at=0: the first add() is reported at once; later ones at most every REPORT_S.
        _live[lid] = {"ref": ref, "how": how, "ptr": ptr, "at": 0.0, "dirty": False, "ntotal": None}
        if ptr is not None:
            _by_ptr[ptr] = lid
    try:
        msg: dict[str, Any] = dict(_state(idx), ev="new", id=lid, how=how, ptr=ptr)
        _live[lid]["ntotal"] = msg["ntotal"]
    except Exception:
        msg = {"ev": "new", "id": lid, "how": how, "ptr": ptr, "type": type(idx).__name__}
    if serialized is not None:
        msg["serialized_bytes"] = int(serialized)
    _send(msg)


def _freed(lid: str) -> None:
    try:
        with _lock:
            st = _live.pop(lid, None)
            if st is not None and _by_ptr.get(st["ptr"]) == lid:
                del _by_ptr[st["ptr"]]
        if st is not None and not _exiting[0]:
            _send({"ev": "freed", "id": lid, "ntotal": st["ntotal"]})
    except Exception:
        pass


def _report(lid: str, st: _Live, idx: Any) -> None:
    st["at"] = time.monotonic()
    st["dirty"] = False
    state = _state(idx)
    st["ntotal"] = state["ntotal"]
    _send(dict(state, ev="update", id=lid))


def _after_add(idx: Any) -> None:
    ptr = _ptr(idx)
    with _lock:
        lid = _by_ptr.get(ptr)
        st = _live.get(lid) if lid else None
        if st is None or lid is None:
            return
        if time.monotonic() - st["at"] < REPORT_S:
            st["dirty"] = True
            st["ntotal"] = int(idx.ntotal)  # one field read: the last size is known even if it dies unreported
            return
    _report(lid, st, idx)


def _tick() -> None:
    # Adds throttled on the user's thread, and sizes changed where no Python add() ran (a quantizer filled by
    # train(), merge_from, C++ helpers): one ntotal read per live index finds them. Sizes are read, never data.
    with _lock:
        live = list(_live.items())
    for lid, st in live:
        idx = st["ref"]()
        if idx is None:
            continue
        try:
            if st["dirty"] or int(idx.ntotal) != st["ntotal"]:
                _report(lid, st, idx)
        except Exception:
            pass


def _serialized(idx: Any, nbytes: int | None) -> None:
    lid = _by_ptr.get(_ptr(idx))
    if lid is not None and nbytes is not None:
        _send({"ev": "serialized", "id": lid, "serialized_bytes": int(nbytes), "ntotal": int(idx.ntotal)})


def _wrap_ctor(cls: Any) -> None:  # a faiss Index class
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            if not getattr(_inside, "depth", 0):
                _track(self, cls.__name__ + "()")
        except Exception:
            pass

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _wrap_add(cls: Any, name: str) -> None:
    original = cls.__dict__[name]

    def add(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        try:
            _after_add(self)
        except Exception:
            pass
        return result

    add.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(cls, name, add)


def _size_of_source(args: tuple[Any, ...]) -> int | None:
    try:
        src = args[0]
        if isinstance(src, (str, bytes)) or hasattr(src, "__fspath__"):
            return os.path.getsize(src)
        if hasattr(src, "nbytes"):
            return int(src.nbytes)
    except Exception:
        pass
    return None


def _wrap_fn(mod: Any, name: str, kind: str) -> None:
    original = getattr(mod, name, None)
    if original is None or getattr(original, "__wrapped__", None) is not None:
        return

    def fn(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_inside, "depth", 0)
        if depth:
            return original(*args, **kwargs)  # e.g. deserialize_index calling read_index: one index, seen once
        _inside.depth = 1
        try:
            result = original(*args, **kwargs)
        finally:
            _inside.depth = 0
        try:
            if kind == "make":
                _track(result, name)
            elif kind == "read":
                _track(result, name, serialized=_size_of_source(args))
            elif kind == "write" and args:
                _serialized(args[0], _size_of_source(args[1:]))
            elif kind == "serialize" and args:
                _serialized(args[0], getattr(result, "nbytes", None))
        except Exception:
            pass
        return result

    fn.__wrapped__ = original  # type: ignore[attr-defined]
    fn.__name__ = name
    fn.__doc__ = getattr(original, "__doc__", None)
    setattr(mod, name, fn)


def _attach(faiss: Any) -> None:
    global _faiss
    _faiss = faiss
    bases = tuple(c for c in (getattr(faiss, "Index", None), getattr(faiss, "IndexBinary", None)) if c)
    for name, obj in list(vars(faiss).items()):
        if isinstance(obj, type) and issubclass(obj, bases):
            try:
                if "__init__" in obj.__dict__:
                    _wrap_ctor(obj)
                for meth in ("add", "add_with_ids"):
                    if meth in obj.__dict__:
                        _wrap_add(obj, meth)
            except Exception:
                pass
    for name in ("index_factory", "index_binary_factory", "clone_index", "clone_binary_index",
                 "index_cpu_to_gpu", "index_gpu_to_cpu", "index_cpu_to_all_gpus", "index_cpu_to_gpus_list",
                 "index_cpu_to_gpu_multiple_py", "index_binary_cpu_to_gpu", "index_binary_gpu_to_cpu"):
        _wrap_fn(faiss, name, "make")
    for name in ("read_index", "read_index_binary", "deserialize_index", "deserialize_index_binary"):
        _wrap_fn(faiss, name, "read")
    for name in ("write_index", "write_index_binary"):
        _wrap_fn(faiss, name, "write")
    for name in ("serialize_index", "serialize_index_binary"):
        _wrap_fn(faiss, name, "serialize")
    every(2.0, _tick)
    atexit.register(_exiting.__setitem__, 0, True)
    os.register_at_fork(after_in_child=_after_fork)


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()


def install(channel: Channel) -> None:
    """Attach to faiss once the user's code imports it."""
    global _channel
    _channel = channel
    from ..hooks import when_imported
    when_imported("faiss", _attach)
