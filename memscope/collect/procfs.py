"""Every /proc read memscope does, in one place (Linux). ``portable.py`` is its psutil twin for macOS.

These are the hot path of the sampler: each reads one small file with one syscall and parses it by hand
(psutil objects cost more than the read itself at 10 Hz over a 16-process tree).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

PF_EXITING = 0x4
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Unreadable(OSError):
    """/proc could not be read for want of a resource (descriptors, memory): the process may well be alive, so
    this is never taken for "gone"."""


_RESOURCE = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


def _read(path: str, size: int = 65536) -> bytes | None:
    """The file's bytes; None if the process is gone or the file is closed to us; Unreadable if memscope itself
    ran out of a resource."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        if exc.errno in _RESOURCE:
            raise Unreadable(exc.errno, os.strerror(exc.errno), path) from None
        return None
    try:
        return os.read(fd, size)
    except OSError as exc:
        if exc.errno in _RESOURCE:
            raise Unreadable(exc.errno, os.strerror(exc.errno), path) from None
        return None
    finally:
        os.close(fd)


def first_denied(pids: list[int], name: str) -> int | None:
    """The first of ``pids`` whose /proc/<pid>/<name> is closed to memscope by permission (another user's
    process: ptrace rules), or None."""
    for pid in pids:
        try:
            os.close(os.open(f"/proc/{pid}/{name}", os.O_RDONLY))
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                return pid
    return None


def list_pids() -> list[int]:
    """Every pid in /proc."""
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError as exc:
        if exc.errno in _RESOURCE:
            raise Unreadable(exc.errno, os.strerror(exc.errno), "/proc") from None
        raise


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/PID/stat memscope reads."""

    pid: int
    comm: str
    state: str
    ppid: int
    pgid: int
    sid: int
    starttime: int  # clock ticks since boot: (pid, starttime) identifies a process across pid reuse
    exit_code: int | None  # wait status, meaningful for zombies (Linux >= 3.5)
    flags: int = 0  # PF_* flags: PF_EXITING (0x4) while the process is on its way out
    cpu: int = 0  # utime + stime, clock ticks: how much work it did (which Python process is the training)


def parse_stat(data: bytes) -> Stat | None:
    """/proc/PID/stat's text as a Stat (the command name may hold spaces and parentheses)."""
    # comm is in parentheses and may itself contain spaces and ')': split on the last ')'.
    try:
        text = data.decode("utf-8", "replace")
        lp, rp = text.index("("), text.rindex(")")
        pid = int(text[:lp])
        comm = text[lp + 1 : rp]
        rest = text[rp + 2 :].split()
        exit_code = int(rest[49]) if len(rest) > 49 else None
        cpu = int(rest[11]) + int(rest[12])  # utime + stime
        return Stat(
            pid, comm, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]), exit_code, int(rest[6]), cpu
        )
    except (ValueError, IndexError):
        return None


def read_stat(pid: int) -> Stat | None:
    """A process's Stat, None when it is gone (Unreadable when /proc cannot be opened)."""
    data = _read(f"/proc/{pid}/stat", 4096)
    return parse_stat(data) if data else None


def read_statm(pid: int) -> tuple[int, int] | None:
    """(rss, shared) in bytes. shared = file-backed + shmem resident pages."""
    data = _read(f"/proc/{pid}/statm", 256)
    if not data:
        return None
    parts = data.split()
    try:
        return int(parts[1]) * PAGE, int(parts[2]) * PAGE
    except (IndexError, ValueError):
        return None


def parse_smaps_rollup(data: bytes) -> dict[str, int]:
    """smaps_rollup's text as {field: bytes}."""
    out: dict[str, int] = {}
    for line in data.decode("ascii", "replace").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[key.strip()] = int(parts[0]) * 1024
    return out


def read_smaps_rollup(pid: int) -> dict[str, int] | None:
    """Rss, Pss, Pss_Anon, Pss_File, Pss_Shmem, Anonymous, Swap, SwapPss... in bytes; None if unreadable."""
    data = _read(f"/proc/{pid}/smaps_rollup", 8192)
    if not data:
        return None
    d = parse_smaps_rollup(data)
    return d if "Pss" in d else None


def read_cmdline(pid: int) -> list[str] | None:
    """A process's argv, None when it is gone."""
    data = _read(f"/proc/{pid}/cmdline", 1 << 20)
    if data is None:
        return None
    return [a.decode("utf-8", "replace") for a in data.rstrip(b"\0").split(b"\0")] if data else []


def environ_has(pid: int, marker: bytes) -> bool:
    """Whether the process was started with ``marker`` (b"NAME=value") in its environment."""
    data = _read(f"/proc/{pid}/environ", 1 << 20)
    if not data:
        return False
    return marker in data.split(b"\0")


def uptime() -> float:
    """Seconds since boot on the clock /proc/<pid>/stat's start times count on (CLOCK_BOOTTIME)."""
    import time

    return time.clock_gettime(time.CLOCK_BOOTTIME)


def read_environ(pid: int) -> dict[str, str] | None:
    """The environment the process was started with; None if unreadable, or empty (as it reads mid-exec)."""
    data = _read(f"/proc/{pid}/environ", 1 << 20)
    if not data:
        return None
    out = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            out[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def boot_time() -> float:
    """When the machine booted (epoch seconds, /proc/stat's btime)."""
    # /proc/stat can be long (one line per interrupt): read it line by line, not in one bounded read.
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime"):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def catches(pid: int, *signals: int) -> bool:
    """Whether ``pid`` has a handler installed for every one of ``signals`` now (/proc/PID/status SigCgt). exec
    resets handlers to their defaults, so a handler seen here was installed by the image running now."""
    data = _read(f"/proc/{pid}/status", 8192)
    if not data:
        return False
    for line in data.split(b"\n"):
        if line.startswith(b"SigCgt:"):
            try:
                mask = int(line.split()[1], 16)
            except (IndexError, ValueError):
                return False
            return all(mask >> (sig - 1) & 1 for sig in signals)
    return False


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of ``pid`` in clock ticks, None when it is gone."""
    st = read_stat(pid)
    return st.cpu if st is not None else None


def written(pid: int) -> int | None:
    """Bytes ``pid`` has passed to write(2) and its kin (/proc/PID/io ``wchar``: to files, pipes, terminals and
    sockets alike), None when unreadable. A training's prints count wherever they go, captured or not."""
    data = _read(f"/proc/{pid}/io", 1024)
    if not data:
        return None
    for line in data.split(b"\n"):
        if line.startswith(b"wchar:"):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None
