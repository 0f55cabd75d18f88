"""The tensor census, taken inside the process on the collector's request.

One pass over the garbage collector's objects: torch tensors grouped by device, dtype and shape (count, bytes,
how many hold a grad_fn or require grad), Python types by count and size, and the largest containers by length
(an unbounded validation list shows up there). Standard library only; torch is looked up in sys.modules, never
imported. It runs on the agent's reader thread, so the training thread keeps running between GIL switches.
"""
from __future__ import annotations

import gc
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Dict, List, Tuple

    # (device, dtype, shape) -> [count, bytes, with a grad_fn, requiring grad]
    Groups = Dict[Tuple[str, str, Tuple[int, ...]], List[int]]

MAX_TENSOR_ROWS = 60
MAX_TYPE_ROWS = 25
MAX_CONTAINERS = 10
_CONTAINERS = (list, dict, set, tuple, frozenset)


def _tensor_row(t: Any, groups: Groups, storages: dict[tuple[str, int], int]) -> None:  # t: a torch.Tensor
    try:
        device = str(t.device)
        dtype = str(t.dtype).replace("torch.", "")
        shape = tuple(t.shape)
        nbytes = t.numel() * t.element_size()
        has_fn = t.grad_fn is not None
        req = bool(t.requires_grad)
    except Exception:
        return  # a tensor subclass or a meta tensor that refuses: skip it, never fail the census
    try:
        key_ptr = (device, t.untyped_storage().data_ptr())
        if key_ptr not in storages:
            storages[key_ptr] = t.untyped_storage().nbytes()
    except Exception:
        pass
    g = groups.get((device, dtype, shape))
    if g is None:
        g = groups[(device, dtype, shape)] = [0, 0, 0, 0]
    g[0] += 1
    g[1] += nbytes
    g[2] += has_fn
    g[3] += req


def _type_name(tp: type) -> str:
    mod = tp.__dict__.get("__module__") if isinstance(getattr(tp, "__dict__", None), dict) else None
    mod = mod if isinstance(mod, str) else getattr(tp, "__module__", None)
    name = getattr(tp, "__qualname__", None) or getattr(tp, "__name__", "?")
    if not isinstance(name, str):
        name = repr(tp)
    return name if not isinstance(mod, str) or mod == "builtins" else mod + "." + name


def _describe(c: Any) -> str:  # a list, dict, set, tuple or frozenset (or a subclass)
    """'list of Tensor', 'dict of str -> float': what a large container holds, from its first item."""
    name = type(c).__name__
    try:
        if isinstance(c, dict):
            if not c:
                return name
            k = next(iter(c))
            return "%s of %s -> %s" % (name, type(k).__name__, type(c[k]).__name__)
        if len(c):
            return "%s of %s" % (name, type(next(iter(c))).__name__)
    except Exception:
        pass
    return name


def take() -> dict[str, Any]:
    """A census of this process, as a JSON-able dict."""
    start = time.perf_counter()
    cpu0 = time.process_time()
    torch = sys.modules.get("torch")
    tensor_type = getattr(torch, "Tensor", None) if torch is not None else None
    objs = gc.get_objects()
    by_type: dict[type, list[int]] = {}
    groups: Groups = {}
    storages: dict[tuple[str, int], int] = {}
    big: list[tuple[int, Any]] = []   # (len, container) of the largest containers, kept short
    small = 0  # the smallest length in `big` once it is full
    getsizeof = sys.getsizeof
    for o in objs:
        tp = type(o)
        s = by_type.get(tp)
        if s is None:
            s = by_type[tp] = [0, 0]
        s[0] += 1
        try:
            s[1] += getsizeof(o)
        except Exception:
            pass
        if tp in _CONTAINERS or tp.__base__ in _CONTAINERS:
            n = len(o)
            if n > small:
                big.append((n, o))
                if len(big) > 4 * MAX_CONTAINERS:
                    big.sort(key=lambda x: -x[0])
                    del big[MAX_CONTAINERS:]
                    small = big[-1][0]
        elif tensor_type is not None and isinstance(o, tensor_type):
            _tensor_row(o, groups, storages)
    big.sort(key=lambda x: -x[0])
    containers = [{"type": _describe(c), "len": n, "bytes": getsizeof(c)} for n, c in big[:MAX_CONTAINERS]]
    n_objects = len(objs)
    del objs, big
    tensors: list[dict[str, Any]] = [
        {"device": d, "dtype": dt, "shape": list(sh), "count": g[0], "bytes": g[1], "grad_fn": g[2],
         "requires_grad": g[3]} for (d, dt, sh), g in groups.items()]
    tensors.sort(key=lambda r: -r["bytes"])
    types: list[dict[str, Any]] = [{"type": _type_name(tp), "count": c, "bytes": b} for tp, (c, b) in by_type.items()]
    types.sort(key=lambda r: -r["bytes"])
    return {
        "objects": n_objects,
        "tensor_count": sum(r["count"] for r in tensors),
        "tensor_bytes": sum(r["bytes"] for r in tensors),
        "storage_bytes": sum(storages.values()),
        "tensors": tensors[:MAX_TENSOR_ROWS],
        "tensor_groups": len(tensors),
        "types": types[:MAX_TYPE_ROWS],
        "containers": containers,
        "duration_s": round(time.perf_counter() - start, 4),
        "cpu_s": round(time.process_time() - cpu0, 4),
    }
