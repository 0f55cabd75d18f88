"""Host memory and the container's memory limit: /proc/meminfo, /proc/vmstat, cgroup v2 and v1.

Every function takes ``root`` (the filesystem root) so the parsers run on fixture trees in tests. On macOS,
``host_sample`` falls back to psutil and reports no limit.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass

from . import procfs

# v1 reports "no limit" as a huge page-aligned number (9223372036854771712); anything this big is unlimited.
_V1_UNLIMITED = 1 << 60


def _text(root: str, path: str) -> str | None:
    try:
        with open(os.path.join(root, path.lstrip("/")), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def parse_keyed(text: str) -> dict[str, int]:
    """``key value`` or ``key: value kB`` lines (meminfo, vmstat, memory.events, memory.oom_control)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2:
            try:
                v = int(parts[1])
            except ValueError:
                continue
            out[parts[0]] = v * 1024 if len(parts) >= 3 and parts[2] == "kB" else v
    return out


@dataclass(frozen=True)
class Cgroup:
    """A memory cgroup: its path and version (1 or 2)."""

    version: int  # 1 or 2
    path: str  # directory of the process's memory cgroup, under root
    mount: str  # the controller's mount point: limits are looked up from ``path`` up to here


def _mounts(root: str) -> list[tuple[str, str, str, str]]:
    """(mount_root, mount_point, fstype, super_options) from /proc/self/mountinfo."""
    text = _text(root, "/proc/self/mountinfo") or ""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lf, rf = left.split(), right.split()
        if len(lf) >= 5 and len(rf) >= 3:
            out.append((lf[3], lf[4], rf[0], rf[2]))
    return out


def find_memory_cgroup(pid: int | str = "self", root: str = "/") -> Cgroup | None:
    """The memory cgroup of ``pid`` (this process by default), None when none can be read."""
    text = _text(root, f"/proc/{pid}/cgroup")
    if not text:
        return None
    v1_path = v2_path = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        elif "memory" in parts[1].split(","):
            v1_path = parts[2]
    mounts = _mounts(root)
    # A v1 memory controller, where mounted, owns memory even on hybrid hosts (v2 is then mounted without it).
    for version, cg_path in ((1, v1_path), (2, v2_path)):
        if cg_path is None:
            continue
        for mroot, mpoint, fstype, opts in mounts:
            if version == 1 and not (fstype == "cgroup" and "memory" in opts.split(",")):
                continue
            if version == 2 and fstype != "cgroup2":
                continue
            rel = os.path.relpath(cg_path, mroot) if cg_path.startswith(mroot) else cg_path.lstrip("/")
            rel = "" if rel == "." else rel
            full = os.path.normpath(os.path.join(root, mpoint.lstrip("/"), rel))
            probe = "memory.limit_in_bytes" if version == 1 else "memory.max"
            if os.path.exists(os.path.join(full, probe)) or version == 2 and os.path.isdir(full):
                return Cgroup(version, full, os.path.normpath(os.path.join(root, mpoint.lstrip("/"))))
    return None


def _int_file(path: str) -> int | None:
    try:
        with open(path) as f:
            s = f.read().strip()
    except OSError:
        return None
    if s == "max":
        return None
    try:
        return int(s)
    except ValueError:
        return None


@dataclass(frozen=True)
class CgroupMemory:
    """A cgroup's limit, usage and OOM-kill counter."""

    limit: int | None
    usage: int | None
    oom_kills: int | None


def read_cgroup_memory(cg: Cgroup) -> CgroupMemory:
    """The smallest limit from the process's cgroup up to the mount point, its usage and its OOM-kill count."""
    limit_name = "memory.limit_in_bytes" if cg.version == 1 else "memory.max"
    limit = None
    d = cg.path
    while True:
        v = _int_file(os.path.join(d, limit_name))
        if v is not None and (cg.version == 2 or v < _V1_UNLIMITED):
            limit = v if limit is None else min(limit, v)
        if d == cg.mount or len(d) <= len(cg.mount):
            break
        d = os.path.dirname(d)
    usage = _int_file(os.path.join(cg.path, "memory.usage_in_bytes" if cg.version == 1 else "memory.current"))
    events = _text("/", os.path.join(cg.path, "memory.oom_control" if cg.version == 1 else "memory.events"))
    oom = parse_keyed(events).get("oom_kill") if events else None
    return CgroupMemory(limit, usage, oom)


@dataclass(frozen=True)
class HostMemory:
    """The host's memory and swap, and its OOM-kill counter."""

    total: int
    available: int
    swap_total: int
    swap_used: int
    oom_kills: int | None


def read_host_memory(root: str = "/") -> HostMemory:
    """The host's memory now (/proc/meminfo, /proc/vmstat); zeros when unreadable."""
    if sys.platform.startswith("linux"):
        mi = parse_keyed(_text(root, "/proc/meminfo") or "")
        vm = parse_keyed(_text(root, "/proc/vmstat") or "")
        total = mi.get("MemTotal", 0)
        avail = mi.get("MemAvailable", mi.get("MemFree", 0))
        st, sf = mi.get("SwapTotal", 0), mi.get("SwapFree", 0)
        return HostMemory(total, avail, st, st - sf, vm.get("oom_kill"))
    import psutil  # macOS and others: what psutil gives, no OOM counter

    vm_, sw = psutil.virtual_memory(), psutil.swap_memory()
    return HostMemory(vm_.total, vm_.available, sw.total, sw.used, None)


class CgroupFollower:
    """The memory cgroup of a process followed over time, not looked up once: a wrapper may move the run into
    a cgroup of its own after it started. One small read of /proc/<pid>/cgroup a call; resolved on a change."""

    def __init__(self) -> None:
        self.cgroup: Cgroup | None = None
        self._text: bytes | None = None
        self._lock = threading.Lock()  # the sampler and the agent server both follow it

    def follow(self, pid: int) -> tuple[Cgroup, Cgroup | None] | None:
        """(new cgroup, the one before) when ``pid`` is now in another memory cgroup, else None."""
        try:
            with open(f"/proc/{pid}/cgroup", "rb") as f:
                text = f.read()
        except OSError:
            return None
        with self._lock:
            if text == self._text:
                return None
            try:
                st = procfs.read_stat(pid)
            except OSError:
                return None
            if st is None or st.state in ("Z", "X") or st.flags & procfs.PF_EXITING:
                return None  # a process on its way out (an OOM kill) reads as the root cgroup: not a move
            self._text = text
            cg = find_memory_cgroup(pid)
            if cg is None or cg == self.cgroup:
                return None
            before, self.cgroup = self.cgroup, cg
            return cg, before


# The OOM killer's line, the same for the host's and a cgroup's: "Memory cgroup out of memory: Killed process 4130
# (python3) total-vm:...". Its pid is the process's in the kernel's namespace (the host's).
_OOM_VICTIM = re.compile(rb"Killed process (\d+) \(([^)]*)\)")
_KMSG_MAX_RECORDS = 100_000  # one read a record; a log flooded faster than it is read cannot keep us here


_INIT_PID_NS_INO = 0xEFFFFFFC  # PROC_PID_INIT_INO: the inode of the kernel's first PID namespace


def _in_initial_pid_namespace() -> bool:
    try:
        return os.stat("/proc/self/ns/pid").st_ino == _INIT_PID_NS_INO
    except OSError:
        return False


class KernelLog:
    """The kernel's log (/dev/kmsg) from the moment this is made: which processes the OOM killer killed. A
    cgroup's oom_kill counter counts the kills of *any* process in it (a sidecar in the same container), so only
    the kernel's own line names the victim. Unreadable (no CAP_SYSLOG, dmesg_restrict, a container): ``victims``
    says None and the evidence falls back on the counter."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self._fd: int | None = None
        if not _in_initial_pid_namespace():
            return  # the log's pids are the host's: in a container they would name other processes than ours
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            os.lseek(self._fd, 0, os.SEEK_END)  # what came before the run is not its business
        except OSError:
            self.close()

    def victims(self) -> list[tuple[int, str]] | None:
        """(pid, name) of each process the OOM killer killed since, in order; None when the log is unreadable."""
        if self._fd is None:
            return None
        out = []
        for _ in range(_KMSG_MAX_RECORDS):
            try:
                rec = os.read(self._fd, 8192)  # one record a read
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue  # records overwritten before they were read: the next read goes on after them
            except OSError:
                break
            if not rec:
                break
            m = _OOM_VICTIM.search(rec)
            if m:
                out.append((int(m.group(1)), m.group(2).decode("utf-8", "replace")))
        return out

    def close(self) -> None:
        """Let go of the log."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
