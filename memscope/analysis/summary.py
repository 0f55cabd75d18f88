"""The run's summary (schema ``memscope.summary/1``), computed from its record alone.

Because it reads only the record, ``memscope report RUN --json`` gives the same summary as the live run did,
and a record left by a memscope that was itself killed still yields one (exit cause "unknown").
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence, cast

from ..model import KIND_PSS, KIND_RSS, SUMMARY_SCHEMA, ExitInfo, Summary
from ..record.catalogue import ENDING, RUNNING, run_info, run_state
from ..record.reader import RunData
from . import copy_on_read as cor_mod
from . import gpu as gpu_mod
from . import phases as phases_mod
from .advice import advise
from .census import summary_rows as census_rows
from .exit_cause import ExitEvidence, counter_rise, decide, fault_signal
from .leak import assess_by_role, assess_leak, find_spikes, fit_plan, trim_teardown
from .probes import probe_summary
from .scalene import summary_rows as scalene_rows
from .spikes import Spike
from .stacks import last_words
from .stacks import summary_rows as stacks_rows
from .supervision import BOUND_EVENTS, NOTE_EVENTS, bounds, main_pid, notes, process_end
from .verdict import judge, read_inputs

SCHEMA = SUMMARY_SCHEMA


def limit_info(rd: RunData, limit: int | None) -> dict[str, Any] | None:
    """The limit the run is compared against and where it came from: the ``--limit`` flag, the container's
    cgroup, or the host's memory. Views print it with ``terminal.limit_text`` so that all of them say the same."""
    if not limit:
        return None
    meta = rd.run_row().get("meta") or {}
    if meta.get("limit_bytes"):
        source = "flag"
    elif any(h[5] for h in rd.host_rows()):
        source = "cgroup"
    else:
        source = "host"
    return {"bytes": limit, "source": source}


def evidence(rd: RunData) -> ExitEvidence:
    """The exit cause's evidence, from the record."""
    run = rd.run_row()
    procs = rd.processes()
    status = next(iter(rd.events("exit_status")), None)
    st = status["data"] if status else {}
    hosts = rd.host_rows()

    def delta(col: int) -> int | None:
        vals = [h[col] for h in hosts if h[col] is not None]
        return vals[-1] - vals[0] if len(vals) >= 2 else None

    limits = [h[5] or h[1] for h in hosts if (h[5] or h[1])]
    moved = [e["t"] for e in rd.events("cgroup_changed")]  # each cgroup's counter counts on its own
    last = rd.last_tree_total()
    return ExitEvidence(
        root_pid=run["root_pid"],
        returncode=st.get("returncode"),
        main_pid=main_pid(procs, run["root_pid"]),
        stop_requested=st.get("stop_requested"),
        signals_sent=[e["data"] for e in rd.events("signal_sent")],
        exceptions=exceptions(rd),
        faults={e["pid"]: e["data"].get("text", "") for e in rd.events("fault")},
        roles={p["pid"]: p["role"] for p in procs},
        proc_signals={p["pid"]: p["exit_signal"] for p in procs if p["exit_signal"]},
        host_oom_delta=delta(7),
        cgroup_oom_delta=counter_rise([(h[0], h[8]) for h in hosts], moved),
        last_tree_bytes=last[1] if last else None,
        limit_bytes=min(limits) if limits else None,
        maxrss_bytes=st.get("maxrss_bytes"),
        scalene=bool((run.get("meta") or {}).get("scalene")),
        cuda_ooms=gpu_mod.observed_ooms(rd),
        **_agents(rd, run),
        host_available_bytes=hosts[-1][2] if hosts else None,
        host_total_bytes=hosts[-1][1] if hosts else None,
        oom_victims=_oom_victims(rd),
        names={p["pid"]: p["name"] or "" for p in procs},
    )


def exceptions(rd: RunData) -> dict[int, dict[str, Any]]:
    """pid -> the uncaught exception its agent saved: the crash file's, else the one its agent sent over the
    socket (a run that switched user, runuser -u nobody, cannot write in memscope's directory)."""
    sent = {e["pid"]: e["data"] for e in rd.events("agent_exception") if isinstance(e.get("data"), dict)}
    return sent | {e["pid"]: e["data"] for e in rd.events("exception")}


def _oom_victims(rd: RunData) -> dict[int, str] | None:
    """pid -> name of each process the kernel's log says the OOM killer killed during the run; None where the log
    was not readable (or an older record)."""
    ev = next(iter(rd.events("kernel_log")), None)
    data = ev["data"] if ev and isinstance(ev.get("data"), dict) else {}
    if data.get("readable") is not True or not isinstance(data.get("oom_victims"), list):
        return None
    return {
        v["pid"]: str(v.get("name", ""))
        for v in data["oom_victims"]
        if isinstance(v, dict) and isinstance(v.get("pid"), int)
    }


def _agents(rd: RunData, run: dict[str, Any]) -> dict[str, Any]:
    """Which processes memscope could see inside (their agent said hello, and the image that said it is the
    last one: a process that re-executed itself after its hello, with python -I or a cleared environment, runs
    an image with no agent), each one's torchrun RANK, and the re-executions."""
    meta = run.get("meta") or {}
    hellos = rd.events("agent_hello")
    ranks = {h["pid"]: str(h["data"]["rank"]) for h in hellos if h["data"].get("rank") is not None}
    if meta.get("attached"):
        return {"ranks": ranks}  # never an agent: the exit status itself is unknown
    seen: set[int] = set()
    execs: dict[int, dict[str, Any]] = {}
    for e in sorted(rd.events("agent_exec") + hellos, key=lambda e: e["t"]):  # in time order
        if e["kind"] == "agent_exec":
            seen.discard(e["pid"])
            execs[e["pid"]] = e["data"]
        else:
            seen.add(e["pid"])
            execs.pop(e["pid"], None)  # the new image said hello: it has an agent
    return {"agent_pids": seen, "ranks": ranks, "execs": execs}


def _guard(unavailable: dict[str, str], name: str, compute: Callable[[], Any], fallback: Callable[[], Any]) -> Any:
    """One section of the summary: computed, or (when its data breaks it) its empty form, named in ``unavailable``
    with why. A bad record costs its own section, never the summary."""
    try:
        return compute()
    except Exception as exc:
        unavailable[name] = f"{type(exc).__name__}: {exc}"[:300]
        return fallback()


def _no_exit(main: int | None, why: str) -> ExitInfo:
    return {"cause": "unknown", "code": None, "signal": None, "pid": main, "message": why, "traceback": None}


def _no_diagnosis() -> dict[str, Any]:
    leak = assess_leak([], []).to_dict()
    leak["by_role"] = {}
    return {"phases": [], "marks": [], "leak": leak, "spikes": [], "workers": None}


def summarize(rd: RunData) -> Summary:
    """The summary of a record (schema memscope.summary/1, model.Summary): pure, from the reader's data. Each
    section is computed on its own: one that fails is left empty and named in ``unavailable``."""
    rd.hold_events()
    try:
        return _summarize(rd)
    finally:
        rd.hold_events(False)


def _summarize(rd: RunData) -> Summary:
    unavailable: dict[str, str] = {}
    run = rd.run_row()
    procs = _guard(unavailable, "processes", rd.processes, list)
    ended = bool(rd.events("exit_status"))

    def bare_evidence() -> ExitEvidence:
        st = next(iter(rd.events("exit_status")), None)
        rc = st["data"].get("returncode") if st else None
        return ExitEvidence(
            root_pid=run["root_pid"], returncode=rc if type(rc) is int else None, main_pid=run["root_pid"]
        )

    ev = _guard(unavailable, "evidence", lambda: evidence(rd), bare_evidence)
    if not ended:
        exit_ = _no_exit(
            ev.main_pid,
            "The record ends without an exit: the run is still going, or memscope was stopped before "
            "it ended (the samples up to that moment are kept).",
        )
    else:
        exit_ = _guard(
            unavailable,
            "exit",
            lambda: decide(ev),
            lambda: _no_exit(ev.main_pid, "memscope could not work out how the run ended from its record."),
        )
    # The tree's peak PSS at the RSS rate (a spike between two PSS rounds is seen); the PSS rounds' own peak is
    # kept beside it.
    measured_peak = rd.tree_peak(KIND_PSS)
    pss_peak = rd.fast_peak() or measured_peak
    rss_peak = rd.tree_peak(KIND_RSS)
    peaks = rd.peaks_by_pid()
    duration = run["duration_s"]
    if duration is None:
        last = rd.last_sample_t()
        duration = last if last is not None else 0.0
        st = next(iter(rd.events("exit_status")), None)
        if st is not None:
            duration = max(duration, st["t"])
    summary: Summary = {
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
            "tree_pss_measured_bytes": measured_peak[1] if measured_peak else None,
        },
        "limit_bytes": ev.limit_bytes,
        "limit": _guard(unavailable, "limit", lambda: limit_info(rd, ev.limit_bytes), lambda: None),
        "processes": [
            {
                "pid": p["pid"],
                "ppid": p["ppid"],
                "role": p["role"],
                "cmdline": p["cmdline"],
                "peak_rss_bytes": peaks.get(p["pid"], (0, None))[0],
                "peak_pss_bytes": peaks.get(p["pid"], (0, None))[1],
                # A process that is not memscope's child (a worker) is not reaped by it: its faulthandler dump names
                # the signal when the exit status could not be seen.
                "exit_code": p["exit_code"],
                "exit_signal": p["exit_signal"] or fault_signal(ev.faults.get(p["pid"])),
                "end": process_end(p),
            }
            for p in procs
        ],
        "warnings": _guard(
            unavailable,
            "warnings",
            lambda: notes(
                procs,
                {k: rd.events(k) for k in (*NOTE_EVENTS, "phase", "mark", "limits")},
                ev.main_pid,
                bool(ev.stop_requested),
            ),
            list,
        ),
        "bounded": _guard(unavailable, "bounded", lambda: bounds({k: rd.events(k) for k in BOUND_EVENTS}), dict),
        "record": rd.path,
    }
    # The sections below are added in this order (the JSON's), each computed on its own.
    # Copy-on-read first: the verdict names it as the kind of growth (analysis/growth.py).
    cor = _guard(
        unavailable,
        "copy_on_read",
        lambda: cor_mod.assess(rd).to_dict(),
        lambda: cor_mod.CopyOnRead(False, reason="memscope could not read the workers' rounds.").to_dict(),
    )
    diag = _guard(unavailable, "diagnosis", lambda: diagnosis(rd, ev, float(duration), cor), _no_diagnosis)
    summary["phases"], summary["marks"], summary["leak"] = diag["phases"], diag["marks"], diag["leak"]
    summary["spikes"], summary["workers"] = diag["spikes"], diag["workers"]
    summary["copy_on_read"] = cor
    gpu = _guard(
        unavailable,
        "gpu",
        lambda: gpu_mod.summary_keys(rd),
        lambda: dict.fromkeys(("cuda_oom", "allocator", "gpu", "compile_pool")),
    )
    summary["cuda_oom"], summary["allocator"] = gpu["cuda_oom"], gpu["allocator"]
    summary["gpu"], summary["compile_pool"] = gpu["gpu"], gpu["compile_pool"]
    # loads, faiss, malloc, each on its own: their keys come from the probes' registry (agent/protocol.PROBES),
    # data the checker cannot follow, so they go in through the summary seen as a plain dict, here only.
    cast("dict[str, Any]", summary).update(probe_summary(rd, unavailable))
    summary["census"] = _guard(unavailable, "census", lambda: census_rows(rd.events("census")), list)
    summary["scalene"] = _guard(unavailable, "scalene", lambda: scalene_rows(rd.events("scalene_snapshot")), list)
    summary["stacks"] = _guard(unavailable, "stacks", lambda: stacks_rows(rd.events("stacks")), list)
    summary["last_words"] = _guard(
        unavailable, "last_words", lambda: _last_words(rd, run, summary, procs, ended), lambda: None
    )
    # Last: advice reads the whole summary (probe keys included).
    summary["advice"] = _guard(unavailable, "advice", lambda: advise(summary), list)
    summary["leak"]["advice"] = next((a["text"] for a in summary["advice"] if a["topic"] == "leak"), None)
    summary["unavailable"] = unavailable
    return summary


def _last_words(
    rd: RunData, run: dict[str, Any], summary: Summary, procs: list[dict[str, Any]], ended: bool
) -> dict[str, Any] | None:
    """The last capture before a kill or crash, in one sentence, or why there is none (analysis/stacks.py)."""
    if not ended:
        return None
    exit_ = summary["exit"]
    row = next((p for p in procs if p["pid"] == exit_.get("pid")), None)
    end_t = row["exit_t"] if row and row.get("exit_t") is not None else None
    if end_t is None:
        st = next(iter(rd.events("exit_status")), None)
        end_t = st["t"] if st else None
    meta = run.get("meta") or {}
    agent = bool(meta.get("agent", True)) and not meta.get("attached")
    lim, last = summary.get("limit_bytes"), rd.last_tree_total()
    frac = last[1] / lim if lim and last and last[1] else None
    high = meta.get("stacks_at")  # None: a record from before stacks
    return last_words(
        summary.get("stacks") or [],
        dict(exit_),
        end_t,
        agent,
        bool(rd.events("agent_hello")),
        frac,
        high if isinstance(high, (int, float)) else None,
    )


def diagnosis(
    rd: RunData, ev: ExitEvidence, duration: float, copy_on_read: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Phases, the leak verdict (tree and per role) and spikes, from the fast series: the tree's PSS at every RSS
    round, measured in PSS rounds and carried forward between them by each process's private memory. The leak
    verdict fits its private part (anonymous PSS + swap): the file-backed part of PSS moves whenever another
    process maps or drops the same libraries, and that wobble hid a flat floor. Records without the fast series
    (older memscope) fall back to the PSS rounds (or the RSS rounds where there is no PSS). A downsampled record
    is fitted on one floor point per bucket of its coarsest tier (``RunData.fit_window``) all along: the part not
    yet downsampled, read round by round, would outweigh the rest and sit on another floor."""
    window = rd.fit_window()
    inp = read_inputs(rd, ev.main_pid, duration)
    t, y = inp.total
    if inp.series == "tree_private":
        roles = rd.role_fast_totals(private=True, floor_s=window)
    else:
        roles = rd.role_totals(KIND_PSS if inp.series != "tree_rss" else KIND_RSS, private=inp.series != "tree_rss")
    ended = bool(rd.events("exit_status"))  # an ended run: its teardown is no part of the floor or of a spike
    plan = fit_plan(inp.events, duration, ev.main_pid, ended=ended)
    if ended:
        t, y = trim_teardown(t, y)
    pt, py = plan.span(*inp.tree)
    roles = {r: plan.span(*ty) for r, ty in roles.items()}
    spans = phases_mod.intervals(rd.events("phase"), duration, ev.main_pid)
    auto = list(plan.phases)
    # The time to the limit keeps the file-backed pages in: they count against the limit too.
    limit = ev.limit_bytes
    if limit and y and py and inp.series != "tree_rss":
        limit = max(1, int(limit - max(0, y[-1] - py[-1])))
    spikes = _spikes(t, y, spans, auto)
    # The tree's verdict made with its parts' (analysis/verdict.py, growth.py): the main judged on its own private
    # memory (statm, not proportional: PSS splits what it keeps with every forked worker alive at the time), each
    # other process on its own floor; a leaking part is never hidden by a tree fit that missed it.
    j = judge(
        replace(inp, limit_bytes=limit),
        ended,
        [Spike(s["start_s"], s["end_s"], s["height_bytes"], s["phase"]) for s in spikes],
        copy_on_read,
    )
    verdict, parts, own = j.verdict, j.parts, inp.own
    series = inp.series
    leak = verdict.to_dict()
    leak["series"] = series
    leak["per_process"] = {r: v.to_dict() for r, v in parts.items()}
    leak["growth"] = j.growth.to_dict() if j.growth is not None else None
    live = _live_said(rd, leak)
    if live is not None:
        leak["live"] = live
    if own:
        roles["main"] = plan.span(*own)
    leak["by_role"] = {role: v.to_dict() for role, v in assess_by_role(roles, limit_bytes=limit, phases=auto).items()}
    if own:
        leak["main_private"] = leak["by_role"]["main"]
    return {
        "phases": phases_mod.stats(spans, t, y),
        "marks": [{"t_s": round(e["t"], 3), "text": e["data"].get("text", "")} for e in rd.events("mark")],
        "leak": leak,
        "spikes": spikes,
        "workers": _workers(rd),
    }


def _live_said(rd: RunData, leak: dict[str, Any]) -> dict[str, Any] | None:
    """The live line's last answer (its "live_verdict" events, session/verdict.py) where the whole run's verdict
    differs from it: the card says what it said and that the record changed it, never a silent contradiction."""
    shown = [e for e in rd.events("live_verdict") if isinstance(e.get("data"), dict)]
    if not shown:
        return None
    d = shown[-1]["data"]
    growth = leak.get("growth") or {}
    if (d.get("verdict"), d.get("kind")) == (leak.get("verdict"), growth.get("kind")):
        return None
    return {
        "verdict": str(d.get("verdict")),
        "kind": d.get("kind"),
        "words": str(d.get("words") or ""),
        "t_s": round(float(shown[-1]["t"]), 3),
        "changes": len(shown) - 1,
    }


def _workers(rd: RunData) -> dict[str, Any] | None:
    """DataLoader workers as they were alive together: the most at one moment, and what those held then."""
    if not rd.has_fast:
        return None
    row, alive = None, 0
    for r in rd.role_rounds("dataloader_worker"):  # the round where they held most, and the most alive at once
        alive = max(alive, r[1])
        if r[2] is not None and (row is None or r[2] > (row[2] or 0)):  # row[2] is never None
            row = r
    if row is None:
        return None
    ever = rd.role_count("dataloader_worker")
    epochs = rd.events("epoch")
    persistent = [bool(e["data"].get("persistent")) for e in epochs if "persistent" in e["data"]]
    return {
        "ever": ever,
        "max_alive": alive,
        "at_peak_alive": row[1],
        "peak_pss_bytes": row[2],
        "rss_at_peak_bytes": row[3],
        "peak_at_s": round(row[0], 3),
        "persistent": (any(persistent) if persistent else None),
    }


def _spikes(
    t: Sequence[float], y: Sequence[float], spans: list[tuple[str, float, float]], auto: list[tuple[str, float, float]]
) -> list[dict[str, Any]]:
    """Spikes labelled with the user's own phase (memscope.phase) where one covers them, else train/eval."""
    manual = [p for p in spans if p not in auto]
    out = []
    for sp in find_spikes(t, y, phases=manual or auto):
        d = sp.to_dict()
        if d["phase"] is None and manual:
            d["phase"] = next((n for n, a, b in auto if a <= sp.start_s <= b), None)
        out.append(d)
    return out


def read_summary(path: str) -> dict[str, Any]:
    """A record's summary: the one stored at its end, else computed from its data (a record whose summary is
    missing or not JSON). Raises sqlite3.Error or ValueError when the file is not a memscope record."""
    rd = RunData(path)
    try:
        missing = rd.tables_missing()
        if missing:
            raise ValueError(f"no {', '.join(sorted(missing))} table" if len(missing) < 5 else "no memscope tables")
        summary = stored_or_computed(rd)[0]
    finally:
        rd.close()
    return mark_running(path, summary)


def stored_or_computed(rd: RunData) -> tuple[dict[str, Any], bool]:
    """(the record's summary, whether it is the one stored at its end). The stored one when it has what every view
    reads (the exit's cause and message as text, the peak), else one computed again from the record's data, whose
    warnings say what the stored one lacked: a damaged or hand-edited summary never raises in a view."""
    stored = rd.stored_summary()
    if not isinstance(stored, dict):  # none stored (the run has not ended) or not JSON: the data tells
        return cast(dict[str, Any], summarize(rd)), False
    ex = stored.get("exit")
    lacks = [
        k
        for k, ok in (
            ("exit", isinstance(ex, dict)),
            ("exit.cause", isinstance(ex, dict) and isinstance(ex.get("cause"), str)),
            ("exit.message", isinstance(ex, dict) and isinstance(ex.get("message"), str)),
            ("peak", isinstance(stored.get("peak"), dict)),
        )
        if not ok
    ]
    if not lacks:
        return stored, True
    summary = cast(dict[str, Any], summarize(rd))
    summary["warnings"] = [
        *(summary.get("warnings") or []),
        f"The summary stored in this record lacks {', '.join(lacks)}: this one was computed again from its data.",
    ]
    return summary, False


def mark_running(path: str, summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` of a record that has no end yet: when its run is proven still going (its root process alive, the
    one the record saw start), its exit says "running" instead of "unknown" (the record simply has not ended)."""
    if (summary.get("exit") or {}).get("cause") != "unknown":
        return summary
    try:
        info = run_info(path)
        state = run_state(info)
    except Exception:  # a record being written can be read half-way: then nothing is proven
        return summary
    if state == ENDING:  # its memscope still holds the record: the end is being made, not missing
        message = (
            f"The run's root process {info.root_pid} has exited and memscope is still finishing this record "
            "(stopping what the run left running, making the summary): this is its record so far."
        )
        return dict(summary, exit=dict(summary["exit"], message=message))
    if state != RUNNING:
        return summary
    message = (
        f"The run is still going (its process {info.root_pid} is alive): this is its record so far. "
        "memscope.reopen() in the kernel that started it follows it live."
    )
    silent = _silent_for(path)
    if silent is not None and silent[0] > max(STALE_RECORD_S, 10 * silent[1]):
        # Alive, but nothing recorded for a while: the memscope that watched it is gone (killed, its kernel
        # restarted); the run goes on unwatched.
        message = (
            f"The run's process {info.root_pid} is still alive, but its record stopped {silent[0]:.0f} s ago: the "
            "memscope that watched it is gone (killed, or its kernel restarted), and the run goes on unwatched. "
            "This is its record up to then."
        )
    return dict(summary, exit=dict(summary["exit"], cause="running", message=message))


STALE_RECORD_S = 30.0  # silent this long (and 10 sampling periods), a watched run's record would have a round


def _silent_for(path: str) -> tuple[float, float] | None:
    """Seconds since the record's last sampling round on the wall clock, and the run's sampling period (None: no
    round yet, or unreadable)."""
    try:
        rd = RunData(path)
        try:
            row, last = rd.run_row(), rd.last_sample_t()
        finally:
            rd.close()
    except Exception:
        return None
    t0, interval = row.get("t0_epoch"), (row.get("meta") or {}).get("interval_s")
    if not isinstance(t0, (int, float)) or last is None:
        return None
    return time.time() - (t0 + last), float(interval) if isinstance(interval, (int, float)) else 1.0
