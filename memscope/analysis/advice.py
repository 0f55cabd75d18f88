"""What to do next: one actionable line per finding, grounded in what was measured.

A pure function of the summary (no record access), so a recorded run gets the same advice when reopened. Probe
rows (loads, FAISS indexes, the compile pool, malloc, census) carry their own ``advice`` strings; this module
adds the lines that need the whole picture (the leak verdict per role and phase, the workers, the exit) and
lifts the rest, in order of importance.
"""

from __future__ import annotations

from typing import Any

from ..fmt import fmt_elapsed
from ..model import AdviceLine, ExitInfo, GrowthInfo, LeakInfo, Summary
from .leak import floor_words
from .probes import summary_keys
from .spikes import excursion_words

# The summary keys whose rows carry an ``advice`` line, in the order the advice lists them.
ADVICE_KEYS = ("loads", "faiss", "compile_pool", "cuda_oom", "allocator", "malloc", "gpu")

WORKER_SHARE = 0.5  # workers holding more than half the tree's PSS is worth a line
MANY_WORKERS = 8


def _mib(n: float | None) -> str:
    if n is None:
        return "?"
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def _slow_rate(slope: float) -> str:
    """A slow leak's pace in a unit that does not round it to 0 (a week's 17 MiB/h read "0 MiB/min")."""
    if abs(slope * 60) >= 2**20:
        return f"{_mib(slope * 60)}/min"
    if abs(slope * 3600) >= 2**20:
        return f"{_mib(slope * 3600)}/h"
    return f"{slope * 3600 / 1024:.0f} KiB/h"


def _exit_line(ex: ExitInfo | dict[str, Any]) -> str | None:
    cause = ex.get("cause")
    if cause == "worker_crash":
        sig = ex.get("signal")
        if sig == "SIGKILL":
            return (
                "A DataLoader worker was SIGKILLed: look at its memory in the process table (copy-on-write "
                "growth of big Python lists in the Dataset is the classic cause); set num_workers=0 to get the "
                "failing code's own error in the main process."
            )
        return (
            f"A DataLoader worker died{' of ' + sig if sig else ''}: its stack is in "
            "exit.traceback; set num_workers=0 to get the failing code's own error in the main process."
        )
    if cause == "oom_kill":
        return (
            "The OOM killer ended the run: find what grows in the chart (main or workers, train or eval); "
            "lower batch size or num_workers, memory-map large arrays, or raise the limit."
        )
    if cause == "killed":
        sig = ex.get("signal") or "SIGKILL"  # "killed" is any death by a signal from outside: say which one
        if sig == "SIGPIPE":
            return (
                "The run died writing to a closed pipe: expected under `| head`; otherwise look at what reads its "
                "output (tee, a logger) and why it exited first."
            )
        if sig != "SIGKILL":
            return (
                f"{sig} came from outside memscope: look for who sent it (a scheduler's stop or time limit, "
                "timeout, a person); a training can trap SIGTERM to save a checkpoint before it ends."
            )
        return (
            "SIGKILL came from outside with no OOM counter rising: check the scheduler's time or memory "
            "limits (Slurm, Kubernetes) and who else can kill the job."
        )
    if cause == "cuda_oom":
        return (
            "CUDA ran out of memory: read the allocator summary (reserved vs allocated); reduce the batch, "
            "free tensors kept across steps (a census shows them), or set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True if reserved is far above allocated."
        )
    if cause in ("segfault", "abort", "bus_error"):
        if not ex.get("traceback"):
            return (
                "A crash in native code, and no Python stack was captured: run it again with memscope's agent "
                "loaded (no python -I or -S, keep memscope's PYTHONPATH entry) or with python -X faulthandler "
                "to see the call that entered it; then try that step with num_workers=0 and without "
                "torch.compile."
            )
        return (
            "A crash in native code: the Python stack in exit.traceback shows the call that entered it; "
            "try the same step with num_workers=0 and without torch.compile to narrow it down."
        )
    return None


_VALIDATION_WORDS = ("eval", "valid", "val", "test")


def _growth_line(leak: LeakInfo, growth: GrowthInfo, spikes: list[dict[str, Any]]) -> str | None:
    """The advice for a kind of growth (``leak.growth``): its words first, then what to do about it."""
    kind, words = growth.get("kind"), growth.get("words") or ""
    if kind == "leak":
        where = growth.get("where") or []
        ttl = leak.get("time_to_limit_s")
        eta = f", reaching the limit in {fmt_elapsed(ttl)} at this rate" if ttl else ""  # the card's one time format
        if growth.get("step_name") == "evaluation":
            what = (
                "each evaluation keeps memory: look for outputs, logits or losses kept across it with their graph "
                "(.detach().cpu(), torch.no_grad(), a metric that accumulates); two tensor censuses, one before "
                "and one after an evaluation (run.census()), show what stays"
            )
        elif where == ["dataloader_worker"]:
            what = (
                "workers usually grow by touching Python objects of the Dataset (copy-on-write): keep per-sample "
                "data in numpy arrays, not lists of Python objects"
            )
        else:
            what = (
                "take two tensor censuses a minute apart to see what accumulates: run.census() on the handle of "
                "memscope.run([...]) in Python (a notebook's dashboard has a Tensor census button for it)"
            )
        return f"{words}{eta}: {what}."
    if kind == "more_processes":
        return f"{words}. Budget for the processes alive together (the peak), not a leak."
    if kind == "step":
        return f"{words}. Budget for the new level (a cache, a buffer, a model loaded), not a leak."
    if kind == "spikes" and spikes:
        top = max(spikes, key=lambda s: s.get("height_bytes") or 0)
        phase = top.get("phase")
        ph = f", the highest during '{phase}'" if phase else ""
        return f"{words} ({excursion_words(spikes)}{ph}). Budget for the spike, not a leak: {_spike_fix(phase)}."
    if kind == "copy_on_read":
        return f"{words}."
    return None


def _spike_fix(phase: str | None) -> str:
    if phase and any(w in phase.lower() for w in _VALIDATION_WORDS):
        return "a smaller validation batch, or torch.no_grad() around validation, lowers it"
    if not phase:
        return 'label the step that makes it (with memscope.phase("name"): ...) to see which one it is'
    return f"it comes with '{phase}'"


def _leak_line(leak: LeakInfo, spikes: list[dict[str, Any]]) -> str | None:
    growth = leak.get("growth")
    if isinstance(growth, dict) and growth.get("kind"):
        return _growth_line(leak, growth, spikes)
    v = leak.get("verdict")
    by_role = leak.get("by_role") or {}
    if v == "leak":
        slope = leak.get("slope_bytes_per_s") or 0
        roles = [r for r, d in by_role.items() if d.get("verdict") == "leak"] or [
            r for r, d in (leak.get("per_process") or {}).items() if d.get("verdict") == "leak"
        ]  # a role's total can hide what one of its processes does (its count moves): the per-process floor
        # Copy-on-write: the main's own private memory grows while PSS (which splits shared pages) shows the
        # growth in the forked workers that map them too. The leak is still the main's.
        main_own = (leak.get("main_private") or {}).get("verdict") == "leak" or "main" in roles
        cow = main_own and "dataloader_worker" in roles
        if cow:
            roles = [r for r in roles if r != "dataloader_worker"]
        where = (
            " in the main process (its own private memory grows; forked DataLoader workers share those "
            "pages copy-on-write, so PSS shows part of it in them)"
            if cow
            else " in the DataLoader workers"
            if roles == ["dataloader_worker"]
            else " in the main process"
            if roles == ["main"]
            else f" in {', '.join(roles)}"
            if roles
            else ""
        )
        ttl = leak.get("time_to_limit_s")
        # The time as every view gives it (H:MM:SS, the verdict line's "reaches the limit in 12:56:56").
        eta = f", reaching the limit in {fmt_elapsed(ttl)} at this rate" if ttl else ""
        what = (
            "take two tensor censuses a minute apart to see what accumulates: the dashboard's Tensor census "
            "button, or run.census() on the run's handle (run = %memscope train.py, memscope.last_run(), or "
            "run = memscope.run([...]))"
            if "dataloader_worker" not in roles
            else "workers usually grow by touching Python objects of the Dataset (copy-on-write): keep per-sample "
            "data in numpy arrays, not lists of Python objects"
        )
        pace = (
            f"The memory floor rises {_slow_rate(slope)} (a slow leak)"
            if leak.get("pace") == "slow"
            else f"Memory grows steadily, {_mib(slope)}/s"
        )
        return f"{pace}{where}{eta}: {what}."
    if v == "no_leak" and spikes:
        top = max(spikes, key=lambda s: s.get("height_bytes") or 0)
        phase = top.get("phase")
        ph = f" during '{phase}'" if phase else ""
        fix = (
            "a smaller validation batch, or torch.no_grad() around validation, lowers it"
            if phase and any(w in phase.lower() for w in _VALIDATION_WORDS)
            else 'label the step that makes it (with memscope.phase("name"): ...) to see which one it is'
            if not phase
            else f"it comes with '{phase}'"
        )
        floor = floor_words(leak, _mib)
        return (
            f"No leak: {floor}; {excursion_words(spikes)}, the highest{ph} "
            f"{_mib(top.get('height_bytes'))} above the floor. Budget for the spike, not a leak: {fix}."
        )
    if v == "no_leak" and leak.get("parts") == "processes":
        return f"No leak: {floor_words(leak, _mib)}. Budget for the processes alive together (the peak), not a leak."
    return None


def _crashed_in_code(ex: ExitInfo | dict[str, Any]) -> bool:
    """The run ended by a crash that memory did not cause (a segfault, an abort; a worker's other than by SIGKILL):
    advice to lower the memory peak does not apply to it."""
    cause = ex.get("cause")
    return cause in ("segfault", "abort", "bus_error") or (cause == "worker_crash" and ex.get("signal") != "SIGKILL")


def _workers_line(summary: Summary) -> str | None:
    """From what the workers held while alive together (summing each one's own peak would add up workers that
    never lived at the same time)."""
    if _crashed_in_code(summary.get("exit") or {}):
        return None
    w = summary.get("workers") or {}
    n, held = w.get("at_peak_alive"), w.get("peak_pss_bytes")
    peak = summary.get("peak")
    total = peak.get("tree_pss_bytes") if peak else None
    if not n or not held or not total:
        return None
    if (w.get("max_alive") or 0) < MANY_WORKERS and held <= WORKER_SHARE * total:
        return None
    rss = w.get("rss_at_peak_bytes")
    rss_part = (
        f"; their summed RSS then, {_mib(rss)}, counts the pages they share once per worker"
        if rss and rss > 1.2 * held
        else ""
    )
    # Persistent workers hold their memory through validation: only news to a run that has one.
    validates = any(
        any(v in str(p.get("name", "")).lower() for v in _VALIDATION_WORDS) for p in summary.get("phases") or []
    )
    persistent = (
        " or persistent_workers=False (they hold their memory through validation)"
        if w.get("persistent") and validates
        else ""
    )
    return (
        f"{n} DataLoader workers alive together held {_mib(held)} of PSS at {w.get('peak_at_s', 0):.0f} s "
        f"({_mib(held / n)} each){rss_part}: fewer workers (num_workers){persistent} would lower the peak."
    )


def advise(summary: Summary) -> list[AdviceLine]:
    """The summary's ``advice``: [{"topic", "text"}], most important first, no duplicates."""
    out: list[AdviceLine] = []

    def add(topic: str, text: str | None) -> None:
        if text and all(a["text"] != text for a in out):
            out.append({"topic": topic, "text": text})

    add("exit", _exit_line(summary.get("exit") or {}))
    add("leak", _leak_line(summary.get("leak") or {}, summary.get("spikes") or []))
    censuses = summary.get("census") or []
    if censuses:
        add("census", censuses[-1].get("advice"))
    cor = summary.get("copy_on_read") or {}
    add("copy_on_read", cor.get("advice") if cor.get("detected") else None)
    if not cor.get("detected"):  # the same workers' memory: copy-on-read's line says what to do about it
        add("workers", _workers_line(summary))
    for key in ADVICE_KEYS + tuple(k for k in summary_keys() if k not in ADVICE_KEYS):  # a new probe's: last
        section = summary.get(key)  # a probe's key: a row, or a list of rows
        rows = [section] if isinstance(section, dict) else section if isinstance(section, list) else []
        for row in rows:
            if isinstance(row, dict):
                add(key, row.get("advice"))
    return out
