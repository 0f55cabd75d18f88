"""What an agent may say: a closed set of message kinds, each with typed, size-checked fields.

Anything else is refused before it reaches the recorder or the exit analysis: a kind not listed here (``fault``,
``exit_status``, anything the recorder or the supervisor use among themselves) never comes from a socket.
Probe kinds that carry many figures (allocator stats, index states) accept extra fields, but only plain JSON
values of bounded size; the fields memscope reads are checked by type.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from ..agent.protocol import all_kinds

PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: no real pid is larger
INT_MAX = (1 << 63) - 1  # SQLite's INTEGER, and any byte count memscope could see
MAX_STR = 200_000  # a traceback is cut at 100 000 characters by the agent
MAX_ITEMS = 2_000  # entries of a list or an object
MAX_DEPTH = 6
MAX_FIELDS = 200


class Refused(ValueError):
    """A message memscope does not accept; the text says why, briefly."""


# The kinds and their fields are declared once, in the agent's protocol module.
_COMMON = {"t": "str", "pid": "pid", "wall": "num"}
KINDS: dict[str, tuple[dict[str, Any], bool]] = {k: (fields, extra) for k, (fields, extra, _req) in all_kinds().items()}
REQUIRED: dict[str, tuple[str, ...]] = {k: req for k, (_f, _x, req) in all_kinds().items() if req}


def parse_line(line: bytes) -> dict[str, Any]:
    """One JSON object from one line; NaN and Infinity are not JSON and are refused."""
    try:
        msg = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise Refused(f"not JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise Refused("not a JSON object")
    return msg


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def validate(msg: dict[str, Any]) -> dict[str, Any]:
    """The message if memscope accepts it (unchanged), else Refused."""
    kind = msg.get("t")
    if not isinstance(kind, str) or kind not in KINDS:
        raise Refused(f"unknown message kind {str(kind)[:40]!r}")
    if len(msg) > MAX_FIELDS:
        raise Refused(f"{kind}: too many fields")
    fields, extra = KINDS[kind]
    for name in REQUIRED.get(kind, ()):
        if name not in msg:
            raise Refused(f"{kind}: {name} is missing")
    for name, value in msg.items():
        if not isinstance(name, str):
            raise Refused(f"{kind}: a field name is not a string")
        want = _COMMON.get(name) or fields.get(name)
        if want is None:
            if not extra:
                raise Refused(f"{kind}: unexpected field {name[:40]!r}")
            want = "any"
        if not _ok(value, want):
            raise Refused(f"{kind}: bad {name[:40]!r}")
    return msg


def _int(v: Any, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def _num(v: Any, lo: float) -> bool:
    return _int(v, int(max(lo, -INT_MAX)), INT_MAX) or (type(v) is float and math.isfinite(v) and v >= lo)


# The scalar field kinds (agent/protocol.py says what each means): a test of the value each.
_SCALARS: dict[str, Callable[[Any], bool]] = {
    "pid": lambda v: _int(v, 1, PID_MAX),
    "int": lambda v: _int(v, -INT_MAX, INT_MAX),
    "size": lambda v: _int(v, 0, INT_MAX),
    "num": lambda v: _num(v, -math.inf),
    "secs": lambda v: _num(v, 0),
    "bool": lambda v: type(v) is bool,
    "str": lambda v: type(v) is str and len(v) <= MAX_STR,
    # argv: as many items as the line (MAX_LINE) holds; a long file list is normal
    "strs": lambda v: type(v) is list and all(type(s) is str and len(s) <= MAX_STR for s in v),
    "ints": lambda v: type(v) is list and len(v) <= MAX_ITEMS and all(_int(x, -INT_MAX, INT_MAX) for x in v),
}


def _ok(v: Any, want: Any, depth: int = 0) -> bool:
    """``v`` matches the declared field kind ``want`` (agent/protocol.py says what each kind means)."""
    if isinstance(want, (list, tuple, dict)):
        return _ok_shape(v, want, depth)
    if v is None and want.endswith("?"):
        return True
    want = want.rstrip("?")
    if want == "any":
        return _plain(v, depth)
    test = _SCALARS.get(want)
    if test is None:
        raise ValueError(f"unknown field kind {want!r}")  # a declaration error in agent/protocol.py
    return test(v)


def _ok_shape(v: Any, want: list[Any] | tuple[Any, ...] | dict[str, Any], depth: int) -> bool:
    """``v`` matches a structured kind: [spec] a list of items that each match spec, (spec, ...) an array of
    exactly these items, {name: spec} an object whose named members match (the others bounded JSON)."""
    if isinstance(want, list):
        return (
            type(v) is list and len(v) <= MAX_ITEMS and depth < MAX_DEPTH and all(_ok(x, want[0], depth + 1) for x in v)
        )
    if isinstance(want, tuple):
        return type(v) is list and len(v) == len(want) and all(_ok(x, w, depth + 1) for x, w in zip(v, want))
    return (
        type(v) is dict
        and depth < MAX_DEPTH
        and _plain(v, depth)
        and all(name not in v or _ok(v[name], spec, depth + 1) for name, spec in want.items())
    )


def _plain(v: Any, depth: int) -> bool:
    """Bounded JSON: what the recorder can store and the views can show without surprises."""
    if v is None or type(v) is bool:
        return True
    if type(v) is int:
        return -INT_MAX <= v <= INT_MAX
    if type(v) is float:
        return math.isfinite(v)
    if type(v) is str:
        return len(v) <= MAX_STR
    if depth >= MAX_DEPTH:
        return False
    if type(v) is list:
        return len(v) <= MAX_ITEMS and all(_plain(x, depth + 1) for x in v)
    if type(v) is dict:
        return len(v) <= MAX_ITEMS and all(
            type(k) is str and len(k) <= 200 and _plain(x, depth + 1) for k, x in v.items()
        )
    return False
