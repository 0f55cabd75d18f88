"""NumPy loads: every ``np.load`` and every read of an ``NpzFile`` member, with what it cost in RAM.

Sends ``np_load`` messages (``ev``: "open" for a load, "resident" for how much of a memmap is in RAM now,
"group" for small loads counted together) and ``np_read`` messages (NpzFile member reads; counts accumulate
per member and are sent at most once a second per member, and at exit).

Cheap by design: loads of small files (< SMALL_BYTES) are only counted, with no /proc read; larger ones read
/proc/self/statm before and after (anonymous = resident - shared, file-backed = shared). Memmap residency is
read from /proc/self/smaps by the probes' thread, only while a memmap from np.load is alive, and backs off so
that it never takes more than ~0.2% of one core.
"""
from __future__ import annotations

import os
import threading
import time
import weakref

from . import every

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Callable

    from ..channel import Channel

# numpy is the user's, reached through its module and the objects it hands back: Any here (the agent imports no
# numpy, not even its types).

SMALL_BYTES = 1 << 20        # loads and member reads below this are counted, not measured one by one
READ_SEND_S = 1.0            # a member read often is reported at most this often
RESIDENT_DUTY = 0.002        # the smaps read may take at most this fraction of the thread's time
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_channel: Channel | None = None
_lock = threading.Lock()
_next_id = [0]
_groups: dict[tuple[str, str], list[Any]] = {}  # (dir, suffix) -> [count, nbytes, duration, dtype] (small loads)
_groups_sent: dict[tuple[str, str], int] = {}  # (dir, suffix) -> count last reported
_reads: dict[tuple[str, str], dict[str, Any]] = {}  # (load_id, key) -> state dict (member reads not yet reported)
_memmaps: dict[str, tuple[weakref.ref[Any], int, int]] = {}  # load_id -> (weakref to the memmap, base, length)
_resident_next = [0.0]


# (pid, fd, identity): pread on an open fd costs ~2 us, open+read+close ~14 us
_statm_fd: list[Any] = [None, None, None]


def _statm() -> tuple[int, int] | None:
    """(anonymous, file-backed) resident bytes of this process, or None."""
    from .. import fds

    for _attempt in (0, 1):
        try:
            pid = os.getpid()
            # First use, a forked child holding its parent's file, or a number the program closed and was handed
            # again (never read or close that one: it is the program's now).
            if _statm_fd[0] != pid or not fds.owns(_statm_fd[1], _statm_fd[2]):
                if _statm_fd[1] is not None:
                    fds.close_if_own(_statm_fd[1], _statm_fd[2])
                _statm_fd[0] = _statm_fd[1] = _statm_fd[2] = None
                fd = fds.lift(os.open("/proc/%d/statm" % pid, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
                _statm_fd[1], _statm_fd[2] = fd, fds.identity(fd)
                _statm_fd[0] = pid
            fields = os.pread(_statm_fd[1], 128, 0).split()
            rss, shared = int(fields[1]) * _PAGE, int(fields[2]) * _PAGE
            return rss - shared, shared
        except Exception:
            _statm_fd[0] = None  # open it again, once
    return None


def _delta(before: tuple[int, int] | None, after: tuple[int, int] | None) -> tuple[int | None, int | None]:
    if before is None or after is None:
        return None, None
    return after[0] - before[0], after[1] - before[1]


def _send(msg: dict[str, Any]) -> None:
    ch = _channel
    if ch is not None:
        msg["pid"] = os.getpid()
        ch.send(msg)


def _new_id() -> str:
    with _lock:
        _next_id[0] += 1
        return "%d-%d" % (os.getpid(), _next_id[0])


def _describe(file: Any) -> tuple[str, int | None]:
    """(path for display, size on disk or None) without touching the file's position."""
    try:
        if isinstance(file, (str, bytes)) or hasattr(file, "__fspath__"):
            path = os.fsdecode(os.fspath(file))
            try:
                return path, os.stat(path).st_size
            except OSError:
                return path, None
        name = getattr(file, "name", None)
        if isinstance(name, str):
            try:
                return name, os.fstat(file.fileno()).st_size
            except Exception:
                return name, None
        return "<%s>" % type(file).__name__, None
    except Exception:
        return "<unknown>", None


def _mmap_arg(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    mode = kwargs.get("mmap_mode") if "mmap_mode" in kwargs else (args[1] if len(args) > 1 else None)
    return None if mode is None else str(mode)


def _wrap_load(np: Any, original: Any) -> Callable[..., Any]:
    NpzFile = _npzfile_class(np)
    memmap = np.memmap
    ndarray = np.ndarray

    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            path, size = _describe(args[0] if args else kwargs.get("file"))
            big = size is None or size >= SMALL_BYTES
            before = _statm() if big else None
            t0 = time.perf_counter()
        except Exception:
            return original(*args, **kwargs)
        result = original(*args, **kwargs)  # the user's own errors pass through untouched
        try:
            _after_load(result, args, kwargs, path, big, before, time.perf_counter() - t0, NpzFile, memmap,
                        ndarray)
        except Exception:
            pass
        return result

    load.__wrapped__ = original  # type: ignore[attr-defined]
    load.__doc__ = original.__doc__
    load.__name__ = getattr(original, "__name__", "load")
    load.__module__ = getattr(original, "__module__", "numpy")
    return load


def _after_load(result: Any, args: tuple[Any, ...], kwargs: dict[str, Any], path: str, big: bool,
                before: tuple[int, int] | None, dur: float, NpzFile: Any, memmap: Any, ndarray: Any) -> None:
    requested = _mmap_arg(args, kwargs)
    if isinstance(result, NpzFile):
        load_id = _new_id()
        members: list[list[Any]] = []
        try:
            for info in result.zip.infolist():
                members.append([info.filename[:-4] if info.filename.endswith(".npy") else info.filename,
                                info.file_size, info.compress_type != 0])
        except Exception:
            pass
        try:
            result.__dict__["_memscope"] = (load_id, path, requested)
        except Exception:
            pass
        d = _delta(before, _statm() if big else None)
        _send({"t": "np_load", "ev": "open", "id": load_id, "path": path, "key": None, "kind": "npz",
               "requested_mmap": requested, "mmapped": False, "members": members[:200],
               "duration_s": dur, "anon_delta_bytes": d[0], "file_delta_bytes": d[1]})
        return
    if not isinstance(result, ndarray):
        return  # a pickled object: not an array load
    nbytes = int(result.nbytes)
    mmapped = isinstance(result, memmap)
    if not big and not mmapped:
        key = (os.path.dirname(path), os.path.splitext(path)[1])
        with _lock:
            g = _groups.get(key)
            if g is None:
                g = _groups[key] = [0, 0, 0.0, str(result.dtype)]
            g[0] += 1
            g[1] += nbytes
            g[2] += dur
        return
    load_id = _new_id()
    d = _delta(before, _statm())
    _send({"t": "np_load", "ev": "open", "id": load_id, "path": path, "key": None, "kind": "npy",
           "shape": list(result.shape), "dtype": str(result.dtype), "nbytes": nbytes, "compressed": False,
           "requested_mmap": requested, "mmapped": mmapped, "duration_s": dur,
           "anon_delta_bytes": d[0], "file_delta_bytes": d[1]})
    if mmapped:
        _track_memmap(load_id, result)


def _track_memmap(load_id: str, arr: Any) -> None:
    mm = getattr(arr, "_mmap", None)
    if mm is None:
        return
    # np.memmap maps from the offset rounded down to the allocation granularity; the mapping starts there.
    import mmap as mmap_mod
    lead = int(getattr(arr, "offset", 0) or 0) % mmap_mod.ALLOCATIONGRANULARITY
    base = arr.__array_interface__["data"][0] - lead
    with _lock:
        _memmaps[load_id] = (weakref.ref(arr), base, len(mm))


def _resident_report() -> None:
    """Resident bytes of each live memmap's mapping (file-backed vs anonymous, for copy-on-write pages)."""
    now = time.monotonic()
    with _lock:
        live = {k: v for k, v in _memmaps.items() if v[0]() is not None}
        _memmaps.clear()
        _memmaps.update(live)
    if not live or now < _resident_next[0]:
        return
    t0 = time.perf_counter()
    try:
        with open("/proc/self/smaps", "r") as f:
            text = f.read()
    except Exception:
        return
    for load_id, (_ref, base, length) in live.items():
        rss = anon = 0
        found = False
        start = "%08x-" % base
        i = text.find("\n" + start) + 1 if not text.startswith(start) else 0
        if i > 0 or text.startswith(start):
            found = True
            end = text.find("VmFlags", i)
            block = text[i:end if end > 0 else len(text)]
            for line in block.split("\n"):
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Anonymous:"):
                    anon = int(line.split()[1]) * 1024
        if found:
            _send({"t": "np_load", "ev": "resident", "id": load_id, "resident_bytes": rss,
                   "anon_bytes": anon, "file_bytes": rss - anon, "mapped_bytes": length})
    spent = time.perf_counter() - t0
    _resident_next[0] = time.monotonic() + spent / RESIDENT_DUTY


def _npzfile_class(np: Any) -> Any:
    try:
        return np.lib.npyio.NpzFile
    except Exception:
        from numpy.lib import npyio
        return npyio.NpzFile


def _wrap_getitem(NpzFile: Any, ndarray: Any) -> Callable[[Any, str], Any]:
    original = NpzFile.__getitem__

    def __getitem__(self: Any, key: str) -> Any:
        try:
            info = _member_info(self, key)
            big = info is None or info[0] >= SMALL_BYTES
            before = _statm() if big else None
            t0 = time.perf_counter()
        except Exception:
            return original(self, key)
        result = original(self, key)
        try:
            _after_read(self, key, result, info, before, time.perf_counter() - t0, ndarray)
        except Exception:
            pass
        return result

    __getitem__.__wrapped__ = original  # type: ignore[attr-defined]
    return __getitem__


def _member_info(npz: Any, key: str) -> tuple[int, bool] | None:
    """(uncompressed size, compressed) of a member, from the zip directory NpzFile has already read."""
    files = getattr(npz, "_files", None)
    if isinstance(files, dict):  # numpy 2.4 (seen): key -> member name
        name = files.get(key)
    elif files is not None:      # numpy 2.1 (Colab's, seen): the member names; "X" is stored as "X.npy"
        name = key if key in files else key + ".npy" if key + ".npy" in files else None
    else:
        name = None
    if name is None:
        return None
    zi = npz.zip.getinfo(name)
    return zi.file_size, zi.compress_type != 0  # 0: ZIP_STORED


def _after_read(npz: Any, key: str, result: Any, info: tuple[int, bool] | None, before: tuple[int, int] | None,
                dur: float, ndarray: Any) -> None:
    if not isinstance(result, ndarray):
        return
    meta = npz.__dict__.get("_memscope")
    if meta is None:  # an NpzFile opened without np.load
        fid = getattr(npz, "fid", None) or getattr(getattr(npz, "zip", None), "fp", None)
        meta = (_new_id(), getattr(fid, "name", "<npz>"), None)
        npz.__dict__["_memscope"] = meta
    load_id, path, requested = meta
    d = _delta(before, _statm() if before is not None else None)
    now = time.monotonic()
    k = (load_id, str(key))
    with _lock:
        st = _reads.get(k)
        if st is None:
            st = _reads[k] = {"t": "np_read", "id": load_id, "path": path, "key": str(key),
                              "shape": list(result.shape), "dtype": str(result.dtype), "nbytes": int(result.nbytes),
                              "compressed": bool(info[1]) if info else None, "requested_mmap": requested,
                              "mmapped": False, "reads": 0, "duration_s": 0.0, "first_duration_s": dur,
                              "anon_delta_bytes": d[0], "file_delta_bytes": d[1], "sent": 0, "at": 0.0}
        st["reads"] += 1
        st["duration_s"] += dur
        due = st["reads"] == 1 or now - st["at"] >= READ_SEND_S
        if due:
            st["at"] = now
            st["sent"] = st["reads"]
            msg = {k2: v for k2, v in st.items() if k2 not in ("sent", "at")}
    if due:
        _send(msg)


def _flush() -> None:
    """Counts not yet reported (member reads since the last message, small loads)."""
    with _lock:
        pending = [{k2: v for k2, v in st.items() if k2 not in ("sent", "at")}
                   for st in _reads.values() if st["reads"] != st["sent"]]
        for st in _reads.values():
            st["sent"], st["at"] = st["reads"], time.monotonic()
        groups = [(k, list(v)) for k, v in _groups.items() if v[0] != _groups_sent.get(k)]
        for k, v in groups:
            _groups_sent[k] = v[0]
    for msg in pending:
        _send(msg)
    for (d, suffix), (count, nbytes, dur, dtype) in groups:
        _send({"t": "np_load", "ev": "group", "id": "group:%s*%s" % (d, suffix),
               "path": os.path.join(d, "*" + suffix), "key": None, "kind": "small", "count": count,
               "nbytes": nbytes, "duration_s": dur, "dtype": dtype})


def _attach(np: Any) -> None:
    NpzFile = _npzfile_class(np)
    if getattr(np.load, "__wrapped__", None) is None:
        np.load = _wrap_load(np, np.load)
    if getattr(NpzFile.__getitem__, "__wrapped__", None) is None:
        NpzFile.__getitem__ = _wrap_getitem(NpzFile, np.ndarray)
    every(2.0, _flush)
    every(2.0, _resident_report)
    os.register_at_fork(after_in_child=_after_fork)


def _after_fork() -> None:
    # A forked worker counts its own reads and loads from zero (the parent reports its own).
    global _lock
    _lock = threading.Lock()
    _reads.clear()
    _groups.clear()
    _groups_sent.clear()


def install(channel: Channel) -> None:
    """Attach to numpy's load once the user's code imports numpy."""
    global _channel
    _channel = channel
    from ..hooks import when_imported
    when_imported("numpy", _attach)
