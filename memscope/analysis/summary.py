"""The run's summary (schema ``memscope.summary/1``), computed from its record alone.

Because it reads only the record, ``memscope report RUN --json`` gives the same summary as the live run did,
and a record left by a memscope that was itself killed still yields one (exit cause "unknown").
"""
from __future__ import annotations

from typing import Any

from ..store import KIND_PSS, KIND_RSS, RunData
from .exit_cause import ExitEvidence, decide

SCHEMA = "memscope.summary/1"


def main_pid(processes: list[dict[str, Any]], root_pid: int) -> int:
    for role in ("main", "rank"):
        pids = [p["pid"] for p in processes if p["role"] == role]
        if pids:
            return min(pids) if role == "rank" else pids[0]
    return root_pid


def evidence(rd: RunData) -> ExitEvidence:
    run = rd.run_row()
    procs = rd.processes()
    status = next(iter(rd.events("exit_status")), None)
    st = status["data"] if status else {}
    hosts = rd.host_rows()

    def delta(col: int) -> int | None:
        vals = [h[col] for h in hosts if h[col] is not None]
        return vals[-1] - vals[0] if len(vals) >= 2 else None

    limits = [h[5] or h[1] for h in hosts if (h[5] or h[1])]
    last = rd.last_tree_total()
    return ExitEvidence(
        root_pid=run["root_pid"],
        returncode=st.get("returncode"),
        main_pid=main_pid(procs, run["root_pid"]),
        stop_requested=st.get("stop_requested"),
        exceptions={e["pid"]: e["data"] for e in rd.events("exception")},
        faults={e["pid"]: e["data"].get("text", "") for e in rd.events("fault")},
        roles={p["pid"]: p["role"] for p in procs},
        proc_signals={p["pid"]: p["exit_signal"] for p in procs if p["exit_signal"]},
        host_oom_delta=delta(7),
        cgroup_oom_delta=delta(8),
        last_tree_bytes=last[1] if last else None,
        limit_bytes=min(limits) if limits else None,
        maxrss_bytes=st.get("maxrss_bytes"),
    )


def summarize(rd: RunData) -> dict[str, Any]:
    run = rd.run_row()
    procs = rd.processes()
    ev = evidence(rd)
    ended = bool(rd.events("exit_status"))
    exit_ = decide(ev) if ended else {
        "cause": "unknown", "code": None, "signal": None, "pid": ev.main_pid,
        "message": "The record ends without an exit: the run is still going, or memscope was stopped before "
                   "it ended (the samples up to that moment are kept).",
        "traceback": None}
    pss_peak = rd.tree_peak(KIND_PSS)
    rss_peak = rd.tree_peak(KIND_RSS)
    peaks = rd.peaks_by_pid()
    duration = run["duration_s"]
    if duration is None:
        row = rd.con.execute("SELECT MAX(t) FROM samples").fetchone()
        duration = row[0] if row and row[0] is not None else 0.0
        st = next(iter(rd.events("exit_status")), None)
        if st is not None:
            duration = max(duration, st["t"])
    return {
        "schema": SCHEMA,
        "run_id": run["id"],
        "command": run["command"],
        "started_at": run["started_at"],
        "duration_s": round(float(duration), 3),
        "exit": exit_,
        "peak": {
            "tree_pss_bytes": pss_peak[1] if pss_peak else None,
            "tree_rss_bytes": rss_peak[1] if rss_peak else 0,
            "at_s": round((pss_peak or rss_peak or (0.0, 0))[0], 3),
        },
        "limit_bytes": ev.limit_bytes,
        "processes": [{
            "pid": p["pid"], "ppid": p["ppid"], "role": p["role"], "cmdline": p["cmdline"],
            "peak_rss_bytes": peaks.get(p["pid"], (0, None))[0],
            "peak_pss_bytes": peaks.get(p["pid"], (0, None))[1],
            "exit_code": p["exit_code"], "exit_signal": p["exit_signal"],
        } for p in procs],
        "record": rd.path,
    }
