"""Tensor censuses: what accumulates between two of them, and the one line of advice that follows.

Pure functions over the census dicts the agent sends (memscope/agent/census.py), so that a recorded census can
be compared again later exactly as it was live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..fmt import fmt_bytes
from ..wiring import html_of

MIN_GROWTH_BYTES = 1 << 20  # below this, growth between two censuses is noise, not a finding
MIN_GROWTH_COUNT = 3  # fewer new tensors of a kind can be the step in flight


def _key(row: dict[str, Any]) -> tuple[str, str, tuple[int, ...]]:
    return row["device"], row["dtype"], tuple(row["shape"])


def shape_str(shape: list[int] | tuple[int, ...]) -> str:
    """A tensor shape as "(a,b,c)"."""
    return "(" + ",".join(str(s) for s in shape) + ")"


def diff(prev: dict[str, Any] | None, cur: dict[str, Any]) -> dict[str, Any]:
    """What changed from ``prev`` to ``cur``: tensor groups, Python types and the largest containers.

    Rows are sorted by growth in bytes; groups that did not change are left out. With no previous census the
    diff is empty (``since`` is None).
    """
    if prev is None:
        return {"since": None, "tensors": [], "types": [], "containers": [], "tensor_bytes": 0, "objects": 0}
    before = {_key(r): r for r in prev.get("tensors", [])}
    rows = []
    for r in cur.get("tensors", []):
        b = before.pop(_key(r), None)
        d = _delta(r, b, ("count", "bytes", "grad_fn", "requires_grad"))
        if d["count"] or d["bytes"]:
            rows.append(dict(device=r["device"], dtype=r["dtype"], shape=r["shape"], **d))
    for r in before.values():  # groups that disappeared
        rows.append(
            dict(
                device=r["device"],
                dtype=r["dtype"],
                shape=r["shape"],
                **{k: -r[k] for k in ("count", "bytes", "grad_fn", "requires_grad")},
            )
        )
    rows.sort(key=lambda r: -r["bytes"])
    tbefore = {r["type"]: r for r in prev.get("types", [])}
    types = []
    for r in cur.get("types", []):
        b = tbefore.get(r["type"])
        d = _delta(r, b, ("count", "bytes"))
        if d["count"] or d["bytes"]:
            types.append(dict(type=r["type"], **d))
    types.sort(key=lambda r: -r["bytes"])
    # Containers have no identity across censuses: compare the largest one of each kind ("list of Tensor").
    cbefore: dict[str, int] = {}
    for c in prev.get("containers", []):
        cbefore[c["type"]] = max(cbefore.get(c["type"], 0), c["len"])
    containers = []
    seen = set()
    for c in cur.get("containers", []):
        if c["type"] in seen:
            continue
        seen.add(c["type"])
        was = cbefore.get(c["type"], 0)
        # Only kinds seen before: one that newly entered the top list (imports, caches) is not yet a trend.
        if was and c["len"] > was:
            containers.append({"type": c["type"], "len": c["len"], "was": was, "delta": c["len"] - was})
    containers.sort(key=lambda c: -c["delta"])
    return {
        "since": prev.get("t_s"),
        "tensors": rows[:30],
        "types": types[:15],
        "containers": containers[:5],
        "tensor_bytes": cur.get("tensor_bytes", 0) - prev.get("tensor_bytes", 0),
        "objects": cur.get("objects", 0) - prev.get("objects", 0),
    }


def _delta(row: dict[str, Any], before: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, int]:
    return {k: row[k] - (before[k] if before else 0) for k in keys}


def advice(d: dict[str, Any]) -> str | None:
    """One line a person can act on, from a census diff (None for a first census)."""
    if d.get("since") is None:
        return None
    # A few more tensors than last time can be the step in flight; accumulation shows as many more of one kind.
    grown = [r for r in d["tensors"] if r["bytes"] >= MIN_GROWTH_BYTES and r["count"] >= MIN_GROWTH_COUNT]
    grown.sort(key=lambda r: -r["bytes"])
    if grown and 2 * grown[0]["grad_fn"] >= grown[0]["count"]:
        r = grown[0]
        return (
            f"+{r['count']:,} {r['dtype']} {shape_str(r['shape'])} tensors on {r['device']} "
            f"(+{fmt_bytes(r['bytes'], 'tenth')}) since the last census, {r['grad_fn']:,} of them holding grad_fn: "
            "something stores activations without .detach(), which keeps each step's autograd graph alive; "
            "store t.detach() (or .item() for a number)."
        )
    if grown:
        r = grown[0]
        return (
            f"+{r['count']:,} {r['dtype']} {shape_str(r['shape'])} tensors on {r['device']} "
            f"(+{fmt_bytes(r['bytes'], 'tenth')}) since the last census: something keeps tensors across steps "
            "(a list of outputs or predictions?); keep only what you need, on the CPU, or clear it."
        )
    cont = [c for c in d["containers"] if c["delta"] >= 1000]
    if cont:
        c = cont[0]
        return (
            f"the largest {c['type']} grew from {c['was']:,} to {c['len']:,} items since the last census: "
            "something appends every step and never clears it."
        )
    if d["tensor_bytes"] < MIN_GROWTH_BYTES:
        return "nothing grew by more than 1 MiB between the two censuses: live Python objects are not what grows."
    return None


@dataclass
class Census:
    """A census of one process, with its difference from the previous census of the run."""

    pid: int
    t_s: float
    objects: int
    tensor_count: int
    tensor_bytes: int
    storage_bytes: int
    duration_s: float
    tensors: list[dict[str, Any]] = field(default_factory=list)
    types: list[dict[str, Any]] = field(default_factory=list)
    containers: list[dict[str, Any]] = field(default_factory=list)
    diff: dict[str, Any] = field(default_factory=dict)
    advice: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Census":
        """A census from its recorded dict (unknown keys ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """The census as the dict the record and the summary keep."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def __str__(self) -> str:
        lines = [
            f"census of pid {self.pid} at {self.t_s:.1f} s: {self.objects:,} objects, "
            f"{self.tensor_count:,} tensors on {fmt_bytes(self.storage_bytes, 'tenth')} of storage "
            f"({fmt_bytes(self.tensor_bytes, 'tenth')} counting each view; took {self.duration_s:.2f} s)"
        ]
        for r in self.tensors[:8]:
            lines.append(
                f"  {r['count']:>7,} {r['dtype']:<9} {shape_str(r['shape']):<22} {r['device']:<6} "
                f"{fmt_bytes(r['bytes'], 'tenth'):>10}  grad_fn {r['grad_fn']:,}"
            )
        if self.diff.get("since") is not None:
            lines.append(f"since the census at {self.diff['since']:.1f} s:")
            for r in self.diff["tensors"][:8]:
                lines.append(
                    f"  {r['count']:>+7,} {r['dtype']:<9} {shape_str(r['shape']):<22} {r['device']:<6} "
                    f"{'+' if r['bytes'] >= 0 else ''}{fmt_bytes(r['bytes'], 'tenth'):>9}  grad_fn {r['grad_fn']:+,}"
                )
        if self.advice:
            lines.append(self.advice)
        return "\n".join(lines)

    def _repr_html_(self) -> str | None:
        # The view registers its renderer from above (memscope/__init__): a data object does not import its view.
        return html_of(self)


def summary_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summary's ``census`` key: every census recorded, in order, each with its diff and advice."""
    return [dict(e["data"], pid=e["pid"], t_s=round(e["t"], 3)) for e in events if not e["data"].get("error")]
