"""What the supervisor saw that the exit cause does not say: processes left behind, agents refused, what memscope
could not read. Pure functions over the record's processes and events; the summary's ``warnings`` and each
process's ``end``."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..collect.output import MAX_LINE
from ..fmt import fmt_bytes

# The events these notes are made from (the summary reads only these kinds).
NOTE_EVENTS = ("leftovers", "left_running", "agent_refused", "collector_degraded", "pss_unreadable", "cgroup_changed")
BOUND_EVENTS = ("collector_degraded", "phase", "mark", "limits")
MAX_LINE_KIB = MAX_LINE // 1024
_BENIGN = {None, "SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE"}


def main_pid(processes: list[dict[str, Any]], root_pid: int) -> int:
    """The run's main process: its "main", else its lowest rank, else the root."""
    for role in ("main", "rank"):
        pids: list[int] = [p["pid"] for p in processes if p["role"] == role]
        if pids:
            return min(pids) if role == "rank" else pids[0]
    return root_pid


def process_end(p: Mapping[str, Any]) -> str | None:
    """How a process of the tree ended, in words: "exit 0", "SIGKILL", "gone, status unseen" (not memscope's
    child and reaped by its parent before memscope looked), or None while it runs."""
    if p.get("exit_signal"):
        return str(p["exit_signal"])
    if p.get("exit_code") is not None:
        return f"exit {p['exit_code']}"
    if p.get("exit_t") is not None:
        return "gone, status unseen"
    return None


def _who(p: Mapping[str, Any] | None, pid: int) -> str:
    if not p:
        return f"pid {pid}"
    name = (p.get("cmdline") or p.get("name") or "")[:60]
    return f"pid {pid} ({p.get('role') or 'other'}{': ' + name if name else ''})"


def notes(
    processes: Iterable[Mapping[str, Any]],
    events: Mapping[str, list[dict[str, Any]]],
    main_pid: int | None,
    stopped: bool,
) -> list[str]:
    """One line per thing the reader should know about how the tree was watched and ended."""
    procs = {p["pid"]: p for p in processes}
    out: list[str] = []
    for e in events.get("leftovers", []):
        pids = e["data"].get("pids") or []
        listed = ", ".join(_who(procs.get(p), p) for p in pids[:5]) + (" …" if len(pids) > 5 else "")
        out.append(
            f"{len(pids)} process(es) of the run outlived its root and were stopped by memscope at the end: {listed}."
        )
    for e in events.get("left_running", []):
        pids = e["data"].get("pids") or []
        listed = ", ".join(_who(procs.get(p), p) for p in pids[:5]) + (" …" if len(pids) > 5 else "")
        out.append(
            f"{len(pids)} process(es) left the run's session, were re-parented to memscope and are still "
            f"running: {listed}. Started from a notebook or a library, memscope cannot prove they are the "
            "run's (the kernel's other children look the same), so it did not signal them; `memscope run` "
            "from a terminal stops them."
        )
    refused = events.get("agent_refused", [])
    if refused:
        pids = sorted({e["pid"] for e in refused if e.get("pid") is not None})
        out.append(
            f"{len(refused)} agent connection(s) with the run's token came from processes not proven "
            f"to be part of the run (pid {', '.join(map(str, pids[:5]))}): ignored, never signalled."
        )
    seen: set[tuple[Any, Any]] = set()
    for e in events.get("collector_degraded", []):
        what = e["data"].get("what")
        if (what, e["data"].get("stream")) in seen:  # once per kind of trouble (per stream for the output)
            continue
        seen.add((what, e["data"].get("stream")))
        if what == "descriptors":
            out.append(
                f"memscope ran out of file descriptors ({e['data'].get('error', '')}) at "
                f"{e['t']:.1f} s: samples are missing from then until it could read /proc again; no live "
                "process was taken for exited."
            )
        elif what == "output":
            out.append(output_cut_words(e["data"]))
        elif what == "agent_messages":
            d = e["data"]
            out.append(
                f"{d.get('over_budget', 0)} agent message(s) over memscope's per-process budget "
                f"({d.get('budget', '')}) were counted and dropped (first from pid {d.get('pid')})."
            )
        elif what == "agent_connections":
            out.append(
                f"memscope's descriptor limit let {e['data'].get('max')} agents connect at once; "
                f"the others waited ({e['data'].get('accept_failures', 0)} accept failures)."
            )
    not_sent = bounds(events)["phases_marks_not_sent"]
    if not_sent:
        out.append(f"{not_sent} phase(s) and mark(s) over the agent's rate (100 a second) were counted, not recorded.")
    for e in events.get("pss_unreadable", [])[:1]:
        out.append(e["data"].get("message") or f"PSS of pid {e['pid']} is unreadable.")
    for e in events.get("cgroup_changed", []):
        out.append(
            f"The run moved to memory cgroup {e['data'].get('to')} at {e['t']:.1f} s; its limit and OOM "
            "counter were read from there on."
        )
    if not stopped:
        ended_by_us = {p for e in events.get("leftovers", []) for p in e["data"].get("pids") or []}
        killed = [
            p
            for p in procs.values()
            if p["pid"] != main_pid and p["pid"] not in ended_by_us and p.get("exit_signal") not in _BENIGN
        ]
        for p in killed[:5]:
            out.append(f"{_who(p, p['pid'])} died of {p['exit_signal']} while the run went on.")
    return out


def output_cut_words(d: Mapping[str, Any]) -> str:
    """What the record kept of a stream past its cap, in words: the bytes it really holds (a line longer than the
    line cap is cut: of a 1.5 GiB line, 64 KiB is kept, not the 32 MiB read), its last lines, the rest counted."""
    read, dropped, kept = (d.get(k) for k in ("recorded_bytes", "dropped_bytes", "kept_bytes"))
    read, dropped = read if isinstance(read, int) else 0, dropped if isinstance(dropped, int) else 0
    head = f"The run wrote {fmt_bytes(read + dropped)} to {d.get('stream')}: "
    if not isinstance(kept, int):  # a record from before kept_bytes: what was read, its long lines maybe cut
        return head + (
            f"memscope read the first {fmt_bytes(read)} (lines cut at {MAX_LINE_KIB} KiB) and recorded its last "
            f"lines; {fmt_bytes(dropped)} after it was counted, not kept."
        )
    if kept >= read * 0.99:
        return head + (
            f"memscope kept the first {fmt_bytes(kept)} and its last lines; the other {fmt_bytes(dropped)} was "
            "counted, not kept."
        )
    return head + (
        f"memscope kept {fmt_bytes(kept)} of it and its last lines (lines longer than {MAX_LINE_KIB} KiB are cut); "
        f"the other {fmt_bytes(read + dropped - kept)} was counted, not kept."
    )


def bounds(events: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The summary's ``bounded``: what memscope's own bounds did to this run's data (issue 22): output past the
    recorded cap, per stream; the user's phases coalesced and phases and marks over the agent's rate (each
    process's last counts, added up); agent messages over the collector's per-connection budget."""
    output = {
        str(e["data"].get("stream")): {
            "recorded_bytes": e["data"].get("recorded_bytes"),
            "kept_bytes": e["data"].get("kept_bytes"),
            "dropped_bytes": e["data"].get("dropped_bytes"),
        }
        for e in events.get("collector_degraded", [])
        if e["data"].get("what") == "output"
    }
    last: dict[Any, tuple[int, int]] = {}
    for kind in ("phase", "mark", "limits"):
        for e in events.get(kind, []):
            d = e["data"]
            c, dr = d.get("coalesced"), d.get("dropped")
            if isinstance(c, int) and isinstance(dr, int):
                old = last.get(e.get("pid"), (0, 0))
                last[e.get("pid")] = (max(old[0], c), max(old[1], dr))
    over = sum(
        int(e["data"].get("over_budget") or 0)
        for e in events.get("collector_degraded", [])
        if e["data"].get("what") == "agent_messages"
    )
    return {
        "output": output,
        "phases_coalesced": sum(c for c, _ in last.values()),
        "phases_marks_not_sent": sum(d for _, d in last.values()),
        "over_budget_messages": over,
    }
