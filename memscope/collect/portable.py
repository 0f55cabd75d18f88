"""procfs.py's twin for systems without /proc (macOS first): the same functions, answered by psutil.

No PSS exists there: ``read_smaps_rollup`` reports USS as the proportional figure (the closest measure psutil
has) so the tree total stays free of double counting.
"""

from __future__ import annotations

import psutil

from .procfs import Stat  # the same record; procfs.py imports on any platform

CLK_TCK = 1  # create_time is already in seconds here
_STATES = {psutil.STATUS_ZOMBIE: "Z", psutil.STATUS_DEAD: "X"}


def list_pids() -> list[int]:
    """Every pid on the machine."""
    return psutil.pids()


def boot_time() -> float:
    """When the machine booted (epoch seconds)."""
    return 0.0


def uptime() -> float:
    """The clock ``read_stat``'s start times count on: here they are epoch seconds."""
    import time

    return time.time()


def read_stat(pid: int) -> Stat | None:
    """A process's stat (ppid, state, start time...), None when it is gone."""
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            return Stat(pid, p.name(), _STATES.get(p.status(), "R"), p.ppid(), 0, 0, int(p.create_time()), None)
    except (psutil.Error, OSError):
        return None


def read_statm(pid: int) -> tuple[int, int] | None:
    """A process's RSS and shared memory, None when it is gone."""
    try:
        m = psutil.Process(pid).memory_info()
        return m.rss, 0
    except (psutil.Error, OSError):
        return None


def read_smaps_rollup(pid: int) -> dict[str, int] | None:
    """A process's PSS family (psutil's memory_full_info), None when unreadable."""
    try:
        m = psutil.Process(pid).memory_full_info()
    except (psutil.Error, OSError):
        return None
    uss = getattr(m, "uss", m.rss)
    return {"Rss": m.rss, "Pss": uss, "Anonymous": uss, "Pss_File": 0, "Swap": getattr(m, "swap", 0)}


def read_cmdline(pid: int) -> list[str] | None:
    """A process's command line, None when it is gone."""
    try:
        return psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return None


def environ_has(pid: int, marker: bytes) -> bool:
    """Whether a process's environment holds ``marker`` (KEY=VALUE bytes)."""
    name, _, value = marker.decode().partition("=")
    try:
        return psutil.Process(pid).environ().get(name) == value
    except (psutil.Error, OSError):
        return False


def read_environ(pid: int) -> dict[str, str] | None:
    """A process's environment, None when unreadable."""
    try:
        return psutil.Process(pid).environ() or None
    except (psutil.Error, OSError):
        return None


def catches(pid: int, *signals: int) -> bool:
    """No SigCgt outside Linux: never proven, so the stacks signal is never sent there."""
    return False


def cpu_ticks(pid: int) -> int | None:
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return int(t.user + t.system)  # CLK_TCK is 1 here


def written(pid: int) -> int | None:
    try:
        io = psutil.Process(pid).io_counters()
    except (psutil.Error, AttributeError):
        return None
    return int(getattr(io, "write_chars", io.write_bytes))
