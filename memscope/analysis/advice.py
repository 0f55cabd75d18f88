"""What to do next: one actionable line per finding, grounded in what was measured.

A pure function of the summary (no record access), so a recorded run gets the same advice when reopened. Probe
rows (loads, FAISS indexes, the compile pool, malloc, census) carry their own ``advice`` strings; this module
adds the lines that need the whole picture (the leak verdict per role and phase, the workers, the exit) and
lifts the rest, in order of importance.
"""
from __future__ import annotations

from typing import Any

WORKER_SHARE = 0.5       # workers holding more than half the tree's PSS is worth a line
MANY_WORKERS = 8


def _mib(n: float | None) -> str:
    if n is None:
        return "?"
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.0f} MiB"


def _exit_line(ex: dict[str, Any]) -> str | None:
    cause = ex.get("cause")
    if cause == "worker_crash":
        return ("A DataLoader worker died: set num_workers=0 to get the failing code's own error in the main "
                "process; if the worker was SIGKILLed, look at its memory in the process table (copy-on-write "
                "growth of big Python lists in the Dataset is the classic cause).")
    if cause == "oom_kill":
        return ("The OOM killer ended the run: find what grows in the chart (main or workers, train or eval); "
                "lower batch size or num_workers, memory-map large arrays, or raise the limit.")
    if cause == "killed":
        return ("SIGKILL came from outside with no OOM counter rising: check the scheduler's time or memory "
                "limits (Slurm, Kubernetes) and who else can kill the job.")
    if cause == "cuda_oom":
        return ("CUDA ran out of memory: read the allocator summary (reserved vs allocated); reduce the batch, "
                "free tensors kept across steps (a census shows them), or set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True if reserved is far above allocated.")
    if cause in ("segfault", "abort", "bus_error"):
        return ("A crash in native code: the Python stack in exit.traceback shows the call that entered it; "
                "try the same step with num_workers=0 and without torch.compile to narrow it down.")
    return None


def _leak_line(leak: dict[str, Any], spikes: list[dict[str, Any]]) -> str | None:
    v = leak.get("verdict")
    by_role = leak.get("by_role") or {}
    if v == "leak":
        rate = (leak.get("slope_bytes_per_s") or 0) * 60
        roles = [r for r, d in by_role.items() if d.get("verdict") == "leak"]
        where = (" in the DataLoader workers" if roles == ["dataloader_worker"] else
                 " in the main process" if roles == ["main"] else
                 f" in {', '.join(roles)}" if roles else "")
        ttl = leak.get("time_to_limit_s")
        eta = f", reaching the limit in about {ttl / 60:.0f} min" if ttl else ""
        what = ("take two tensor censuses a minute apart (the Tensor census button or run.census()) to see what "
                "accumulates" if "dataloader_worker" not in roles else
                "workers usually grow by touching Python objects of the Dataset (copy-on-write): keep per-sample "
                "data in numpy arrays, not lists of Python objects")
        return f"The memory floor rises {_mib(rate)}/min{where}{eta}: {what}."
    if v == "no_leak" and spikes:
        top = max(spikes, key=lambda s: s.get("height_bytes") or 0)
        ph = f" during '{top['phase']}'" if top.get("phase") else ""
        return (f"No leak: the floor is flat; the peaks are spikes{ph} (up to {_mib(top.get('height_bytes'))} above "
                "the floor). Budget for the spike, not a leak: a smaller validation batch lowers it.")
    return None


def _workers_line(summary: dict[str, Any]) -> str | None:
    procs = summary.get("processes") or []
    workers = [p for p in procs if p.get("role") == "dataloader_worker"]
    total = sum(p.get("peak_pss_bytes") or 0 for p in procs)
    wpss = sum(p.get("peak_pss_bytes") or 0 for p in workers)
    if not workers or not total:
        return None
    if len(workers) >= MANY_WORKERS or wpss > WORKER_SHARE * total:
        wrss = sum(p.get("peak_rss_bytes") or 0 for p in workers)
        return (f"{len(workers)} DataLoader workers hold {_mib(wpss)} of PSS ({_mib(wpss / len(workers))} each; "
                f"their summed RSS, {_mib(wrss)}, double-counts shared pages): fewer workers (num_workers) or "
                "persistent_workers=False between epochs would lower the peak.")
    return None


def advise(summary: dict[str, Any]) -> list[dict[str, str]]:
    """The summary's ``advice``: [{"topic", "text"}], most important first, no duplicates."""
    out: list[dict[str, str]] = []

    def add(topic: str, text: str | None) -> None:
        if text and all(a["text"] != text for a in out):
            out.append({"topic": topic, "text": text})

    add("exit", _exit_line(summary.get("exit") or {}))
    add("leak", _leak_line(summary.get("leak") or {}, summary.get("spikes") or []))
    censuses = summary.get("census") or []
    if censuses:
        add("census", censuses[-1].get("advice"))
    add("workers", _workers_line(summary))
    for key in ("loads", "faiss", "compile_pool", "cuda_oom", "allocator", "malloc", "gpu"):
        rows = summary.get(key)
        if isinstance(rows, dict):
            rows = [rows]
        for row in rows or []:
            if isinstance(row, dict):
                add(key, row.get("advice"))
    return out
