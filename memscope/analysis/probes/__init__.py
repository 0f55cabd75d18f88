"""The probes' sections of the summary: one module per probe, named as its agent file (``agent/probes/<module>``),
found through the registry in ``agent/protocol.PROBES``. Each section is pure: ``summarize(events_by_kind)``
returns what the summary keeps under the probe's key.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ...agent.protocol import PROBES
from ...record.reader import RunData


def sections() -> list[tuple[str, tuple[str, ...], ModuleType]]:
    """(summary key, message kinds, section module) of every probe that has a section, in registry order."""
    # Imported by name from the registry: a new probe adds its line there and its file here, nothing else.
    return [
        (key, tuple(kinds), importlib.import_module(f"{__name__}.{module}"))
        for module, key, kinds in PROBES
        if key is not None
    ]


def summary_keys() -> tuple[str, ...]:
    """The summary keys the probes' sections fill."""
    return tuple(key for _module, key, _kinds in PROBES if key is not None)


def summarize_events(
    events: dict[str, list[dict[str, Any]]], unavailable: dict[str, str] | None = None
) -> dict[str, Any]:
    """Every section from events by kind (a live run's, or a record's). A section that fails is shown empty and
    named in ``unavailable`` (with why): one bad record never costs the other sections or the summary."""
    out = {}
    for key, _kinds, mod in sections():
        try:
            out[key] = mod.summarize(events)
        except Exception as exc:
            out[key] = mod.summarize({})
            if unavailable is not None:
                unavailable[key] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def probe_summary(rd: RunData, unavailable: dict[str, str] | None = None) -> dict[str, Any]:
    """The summary keys of every probe's section (``loads``, ``faiss``, ``malloc``) of a record."""
    return summarize_events({k: rd.events(k) for _key, kinds, _mod in sections() for k in kinds}, unavailable)


def top_advice(rows: list[dict[str, Any]], size_key: str) -> str | None:
    """The advice of the largest row that has one: the line analysis/advice.py lifts from a dict-valued key."""
    rows = [r for r in rows if r.get("advice")]
    return max(rows, key=lambda r: r.get(size_key) or 0)["advice"] if rows else None
