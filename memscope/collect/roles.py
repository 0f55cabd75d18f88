"""Which process of the tree is which: a pure function of names, command lines and parentage.

Seed 004's monitor watched ``uv run`` (the wrapper) while the real training process leaked; memscope finds the
Python process running the user's target through any chain of wrappers and names everything around it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

# Python entry points that launch the user's code rather than being it.
_LAUNCHER_MODULES = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "accelerate",
    "deepspeed",
    "uv",
    "pip",
    "scalene",
    "memscope",
}
_LAUNCHER_SCRIPTS = {"torchrun", "accelerate", "deepspeed", "scalene", "memscope", "python-m"}
_RANK_LAUNCHERS = {
    "torch.distributed.run",
    "torch.distributed.launch",
    "torchrun",
    "accelerate",
    "accelerate.commands.launch",
    "deepspeed",
}
_HELPER_PATTERNS = (
    "multiprocessing.resource_tracker",
    "multiprocessing.semaphore_tracker",
    "multiprocessing.forkserver",
    "torch._inductor.autotune_process",
)
_PY_EXE = re.compile(r"^(python|pypy)(\d+(\.\d+)?)?[a-z]?(\.exe)?$")


@dataclass(frozen=True)
class ProcInfo:
    """What the role of a process is decided from: its name, command line and parent, and (for the main, among
    several Python processes) what it did."""

    pid: int
    ppid: int
    name: str  # comm: DataLoader workers rename themselves "pt_data_worker"
    cmdline: tuple[str, ...]
    # The interpreter's own argv, from its agent's hello (this image's): a process that retitled itself
    # (setproctitle) is still the Python running train.py.
    agent_argv: tuple[str, ...] | None = None
    alive: bool = True
    cpu: int = 0  # CPU time so far (clock ticks)
    failed_at: float | None = None  # when it was seen to fail (an exception, a fatal signal, a non-zero status)
    phases: int = 0  # training phases (model.train()/eval(), DataLoader epochs) its agent reported
    start: int = 0  # start time (clock ticks since boot)


@dataclass(frozen=True)
class PyTarget:
    """What a Python command line runs: a script, a module, or code."""

    kind: str  # "script" | "module" | "code" | "repl"
    value: str


def python_target(cmdline: tuple[str, ...] | list[str]) -> PyTarget | None:
    """What a Python command line runs, or None when it is not a Python interpreter."""
    if not cmdline:
        return None
    exe = os.path.basename(cmdline[0])
    if not _PY_EXE.match(exe):
        # A console script (#!/usr/bin/env python) shows as "python /path/torchrun ..."; a bare one as "torchrun".
        return None
    i = 1
    while i < len(cmdline):
        a = cmdline[i]
        if a == "-m" and i + 1 < len(cmdline):
            return PyTarget("module", cmdline[i + 1])
        if a.startswith("-m") and len(a) > 2:
            return PyTarget("module", a[2:])
        if a == "-c" and i + 1 < len(cmdline):
            return PyTarget("code", cmdline[i + 1])
        if a in ("-W", "-X", "-Q"):
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return PyTarget("script", a)
    return PyTarget("repl", "")


def _is_launcher(t: PyTarget) -> bool:
    if t.kind == "module":
        return t.value in _LAUNCHER_MODULES or t.value.split(".")[0] in {"uv", "pip"}
    if t.kind == "script":
        return os.path.basename(t.value) in _LAUNCHER_SCRIPTS
    return False


def _is_rank_launcher(p: ProcInfo) -> bool:
    t = python_target(p.cmdline)
    if t is not None and t.kind == "module":
        return t.value in _RANK_LAUNCHERS
    if t is not None and t.kind == "script":
        return os.path.basename(t.value) in _RANK_LAUNCHERS
    return bool(p.cmdline) and os.path.basename(p.cmdline[0]) in _RANK_LAUNCHERS


def _is_scalene(p: ProcInfo) -> bool:
    t = python_target(p.cmdline)
    return t is not None and (
        (t.kind == "module" and t.value == "scalene") or (t.kind == "script" and os.path.basename(t.value) == "scalene")
    )


def _joined(p: ProcInfo) -> str:
    return " ".join(p.cmdline)


def classify(
    procs: Mapping[int, ProcInfo], root: int, script: str | None = None, agent_main: int | None = None
) -> dict[int, str]:
    """Role of every process in ``procs`` (the tree under ``root``, including adopted escapees).

    ``script``: the user's script when known; ``agent_main``: a pid the agent reported as running it.
    """
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    for v in children.values():
        v.sort()
    # Pass 1: roles told by the process itself, and everything it spawned.
    roles = _told_roles(procs, children)
    # Pass 2: the main, breadth-first from the root so the topmost Python running user code wins.
    main = agent_main if agent_main in procs else None
    if main is None:
        script_real = os.path.realpath(script) if script else None
        candidates: list[int] = []
        for pid in _breadth_first(procs, children, root):
            if pid not in roles and _may_be_main(procs, pid, script_real, candidates):
                candidates.append(pid)
        main = choose_main(procs, candidates)
    if main is not None:
        _main_and_wrappers(procs, children, main, roles)
    for pid in procs:
        roles.setdefault(pid, "other")
    return roles


def _told_roles(procs: Mapping[int, ProcInfo], children: dict[int, list[int]]) -> dict[int, str]:
    """The roles a process's command line or name says: compile workers (with all they spawn), helpers, workers."""
    roles: dict[int, str] = {}
    for p in procs.values():
        if "torch/_inductor/compile_worker" in _joined(p) or "torch._inductor.compile_worker" in _joined(p):
            stack = [p.pid]
            while stack:
                q = stack.pop()
                roles.setdefault(q, "compile_worker")
                stack.extend(children.get(q, ()))
        elif any(h in _joined(p) for h in _HELPER_PATTERNS):
            parent = procs.get(p.ppid)
            if parent is None or parent.cmdline != p.cmdline:
                # A forkserver's children are forks of it (the same command line): they run the user's
                # multiprocessing.Process targets, they are not helpers.
                roles.setdefault(p.pid, "helper")
    for p in procs.values():
        if p.name == "pt_data_worker":
            roles[p.pid] = "dataloader_worker"
    return roles


def _breadth_first(procs: Mapping[int, ProcInfo], children: dict[int, list[int]], root: int) -> list[int]:
    """The tree's pids, breadth-first from the root (from every process whose parent is not in it, without one)."""
    order: list[int] = []
    frontier = [root] if root in procs else sorted(pid for pid in procs if procs[pid].ppid not in procs)
    while frontier:
        order.extend(frontier)
        frontier = [c for pid in frontier for c in children.get(pid, ())]
    return order


def _may_be_main(procs: Mapping[int, ProcInfo], pid: int, script_real: str | None, candidates: list[int]) -> bool:
    """Whether ``pid`` runs the user's code (a script, a module, -c code): a candidate for the main."""
    p = procs[pid]
    t = python_target(p.cmdline)
    if t is None and p.agent_argv:
        p = ProcInfo(pid, p.ppid, p.name, p.agent_argv)  # renamed itself: what its interpreter runs
        t = python_target(p.cmdline)
    parent = procs.get(p.ppid)
    # Scalene re-launches itself as a child (to set its environment) and that child runs the script.
    runs_under_scalene = parent is not None and _is_scalene(p) and _is_scalene(parent)
    if t is None or t.kind == "repl" or (_is_launcher(t) and not runs_under_scalene):
        return False
    if t.kind == "code" and "multiprocessing" in t.value:
        return False  # spawn-method children: workers, not the main
    if script_real and t.kind == "script" and os.path.basename(t.value) != os.path.basename(script_real):
        return False
    # under a candidate (its fork, its own subprocess): the topmost runs the user's code
    return not _has_ancestor(procs, pid, candidates)


def _main_and_wrappers(
    procs: Mapping[int, ProcInfo], children: dict[int, list[int]], main: int, roles: dict[int, str]
) -> None:
    """The main's role (or, under torchrun, every rank's), and the wrappers above it."""
    parent = procs[main].ppid
    if parent in procs and _is_rank_launcher(procs[parent]):
        # torchrun: every sibling running the same target is a rank; the launcher is a wrapper.
        target = python_target(procs[main].cmdline)
        for sib in children.get(parent, ()):
            if python_target(procs[sib].cmdline) == target:
                roles[sib] = "rank"
    else:
        roles[main] = "main"
    # Every ancestor of the main inside the tree is a wrapper (bash, uv, torchrun, python -m launchers).
    q = procs[main].ppid
    while q in procs:
        roles.setdefault(q, "wrapper")
        q = procs[q].ppid


def _has_ancestor(procs: Mapping[int, ProcInfo], pid: int, among: list[int]) -> bool:
    seen: set[int] = set()
    q = procs[pid].ppid
    while q in procs and q not in seen:
        if q in among:
            return True
        seen.add(q)
        q = procs[q].ppid
    return False


def choose_main(procs: Mapping[int, ProcInfo], candidates: list[int]) -> int | None:
    """The main among the Python processes that run the user's code side by side or one after another (a
    script's stages, the two ends of a pipe, a program under `tee`): the one that failed first (what ended the
    run, whatever status the wrapper passed on), else one still running (a stage that finished hands over to
    the next), else the one that reported training phases, else the one that did the most work (CPU time),
    else the first. ``candidates`` in breadth-first order."""
    if not candidates:
        return None

    def rank(i_pid: tuple[int, int]) -> tuple[bool, float, bool, bool, int, int]:
        i, pid = i_pid
        p = procs[pid]
        failed = p.failed_at is not None
        return (failed, -(p.failed_at or 0.0), p.alive, p.phases > 0, p.cpu, -i)

    return max(enumerate(candidates), key=rank)[1]
