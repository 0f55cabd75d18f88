"""Which processes are the run's: discovery, adoption of an agent's hello, exits, and forgetting the exited.

Membership: descendants of the root by parentage, plus every process that carries the run's marker in its
environment (so a process that double-forked out of the session is still found), and once a process is known
it stays known until it exits even if it is re-parented to init. (pid, start time) pairs guard against pid reuse.
One part of ``tree.TreeSampler`` (the roles are ``tree_roles``', the measuring ``tree_measure``'s).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

from ..fmt import decode_wait_status
from ..model import ProcessExited, Record
from .estimate import PssCarry
from .platform import procfs
from .roles import ProcInfo

# Deaths that are a failure of the process itself (not a stop: SIGINT/SIGTERM/SIGKILL may be memscope's own).
_FAILURE_SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL")
FOREIGN_RECHECK_S = 2.0  # how often discovery reads again the processes it found not to be ours


@dataclass
class Tracked:
    """A process of the run as the sampler knows it."""

    pid: int
    start: int
    info: ProcInfo
    role: str = "other"
    create_time: float = 0.0
    alive: bool = True
    exit_known: bool = False
    forked: bool = False  # a fork of a tracked parent that did not exec: it shares the parent's pages
    proof: str = ""  # how it was found to be the run's (supervise.Membership.proof)
    agent_argv: tuple[str, ...] | None = None  # its interpreter's argv, from this image's agent hello
    cpu: int = 0  # CPU ticks at the last read
    failed_at: float | None = None  # wall time of its first failure seen (exception, fatal signal, status)
    phases: int = 0  # phase and epoch messages from its agent
    announced: bool = False  # its ProcessSeen went out for what it runs now (re-announced after an exec)


class MembershipRule(Protocol):
    """How a process is proven part of the run; the supervisor's ``Membership`` is the one implementation (the
    supervisor depends on collect, never the reverse, so the sampler names only this shape)."""

    signal_orphans: bool

    def proof(self, pid: int, st: "procfs.Stat", child_of_member: Callable[["procfs.Stat"], bool]) -> str | None:
        """How ``pid`` belongs to the run, or None."""

    def descends(self, pid: int, st: "procfs.Stat | None" = None) -> bool:
        """Whether ``pid`` descends from the run's root."""


# Exited processes are dropped from memory once recorded (a run that forks 50 processes a second must not grow
# memscope), except those the roles of the others hang on.
KEEP_ROLES = ("main", "wrapper", "rank")
KEEP_FORMER_MAINS = 16  # exited processes that were the main once, kept to be weighed again at the end


class TreeMembership:
    """The process table of ``TreeSampler``: who is the run's, proven by (pid, start time), until recorded exited."""

    root: int
    procs: dict[int, Tracked]
    agent_main: int | None
    refused: list[dict[str, object]]  # agents whose membership could not be proven (first 20)
    pss_wanted: bool
    _emit: Callable[[Record], None]
    _clock: Callable[[], float]
    _marker: bytes | None
    _membership: MembershipRule | None
    _reap: Callable[[int], int | None] | None
    _lock: threading.RLock
    _foreign: dict[int, int]  # pid -> start time of processes checked and found not ours
    _gone: dict[int, int]  # pid -> start time of members exited, recorded and dropped
    _listed: set[int]  # the pids in /proc at the last discovery
    _foreign_checked: float  # time.monotonic() of the last full check of foreign pids
    _hints: dict[int, str]
    _former_mains: OrderedDict[int, None]  # pids once "main", most recent last
    _dirty: bool
    _boot: float
    _carry: PssCarry
    _carry_lock: threading.Lock

    if TYPE_CHECKING:  # the roles' part (tree_roles.TreeRoles)

        def _reclassify(self) -> None: ...

    def _add(self, pid: int, stat: procfs.Stat | None = None, proof: str = "") -> bool:
        stat = stat or procfs.read_stat(pid)
        if stat is None:
            return False
        cmd = procfs.read_cmdline(pid) or []
        parent = self.procs.get(stat.ppid)
        forked = parent is not None and parent.alive and bool(cmd) and tuple(cmd) == parent.info.cmdline
        self.procs[pid] = Tracked(
            pid,
            stat.starttime,
            ProcInfo(pid, stat.ppid, stat.comm, tuple(cmd)),
            create_time=self._boot + stat.starttime / procfs.CLK_TCK,
            forked=forked,
            proof=proof,
        )
        return True

    def _is_member(self, pid: int) -> bool:
        t = self.procs.get(pid)
        return t is not None and t.alive

    def child_of_member(self, st: procfs.Stat, seen: dict[int, procfs.Stat | None] | None = None) -> bool:
        """Whether the process whose stat is ``st`` is the child of a live member, proven by (pid, start time).

        Its parent's pid being a member's is not enough: while memscope was stalled a member may have exited and
        a stranger taken its pid (the entry is not marked exited yet), and the stranger's children would be
        adopted and signalled. So the parent's pid is read again *after* the child's: a process alive then that
        started at the member's recorded start time, no later than the child, held that pid all along, so it is
        the parent the child had when read. ``seen``: parents' stats already read after ``st`` (one discovery)."""
        t = self.procs.get(st.ppid)
        if t is None or not t.alive or t.start < 0 or st.starttime < t.start:
            return False
        if seen is not None and st.ppid in seen:
            now = seen[st.ppid]
        else:
            now = procfs.read_stat(st.ppid)
            if seen is not None:
                seen[st.ppid] = now
        return now is not None and now.starttime == t.start

    def _proof(
        self, pid: int, st: procfs.Stat, parent_only: bool, seen: dict[int, procfs.Stat | None] | None = None
    ) -> str | None:
        if self.child_of_member(st, seen):
            return "parent"
        if parent_only:
            return None
        if self._membership is not None:
            return self._membership.proof(pid, st, lambda s: self.child_of_member(s, seen))
        return "marker" if self._marker and procfs.environ_has(pid, self._marker) else None

    def discover(self, full: bool = False) -> None:
        """Find processes that joined the tree since the last call, and refresh roles.

        Reading /proc/<pid>/stat costs ~10 us a process, and most of the machine's processes are not ours: one
        already found foreign and listed last time too is the same process unless its pid was reused in
        between, so it is read again only every ``FOREIGN_RECHECK_S`` (or with ``full``). A process of ours
        that a reused pid hides is found at that recheck at the latest (a Python one at once, by its hello)."""
        with self._lock:
            pids = procfs.list_pids()
            now = time.monotonic()
            recheck = full or now - self._foreign_checked >= FOREIGN_RECHECK_S
            if recheck:
                self._foreign_checked = now
            new = self._unknown(pids, recheck)
            changed = self._join(new)
            for pid, st in new.items():
                self._foreign[pid] = st.starttime
            live = self._listed = set(pids)
            for d in (self._foreign, self._gone):
                for pid in [p for p in d if p not in live]:
                    del d[pid]  # bounded by the processes that exist now
            changed |= self._refresh()
            self._prune()
            if changed or self._dirty:
                self._reclassify()

    def _unknown(self, pids: list[int], recheck: bool) -> dict[int, procfs.Stat]:
        """The stats of the listed processes not known yet (neither members nor found foreign or gone)."""
        listed, foreign, gone = self._listed, self._foreign, self._gone
        new: dict[int, procfs.Stat] = {}
        for pid in pids:
            t = self.procs.get(pid)
            if t is not None and t.alive:
                continue
            if pid in listed and (pid in gone or (not recheck and pid in foreign)):
                continue
            st = procfs.read_stat(pid)
            if st is None or foreign.get(pid) == st.starttime or gone.get(pid) == st.starttime:
                continue
            if t is not None and t.start == st.starttime:
                continue  # a known process that exited, seen again as a zombie
            new[pid] = st
        return new

    def _join(self, new: dict[int, procfs.Stat]) -> bool:
        """Track those of ``new`` proven the run's, removing them from it (what is left is foreign)."""
        # Parentage to a fixed point (a new child of a new child), then the kernel's other proofs (session,
        # environment marker, re-parented orphan) once for what is left; what they find may have children.
        # Every stat in ``new`` was read before any parent's is read again below (``child_of_member``).
        changed = False
        tried: set[int] = set()
        seen: dict[int, procfs.Stat | None] = {}
        while new:
            grew = True
            while grew and new:
                grew = False
                for pid, st in list(new.items()):
                    if self._proof(pid, st, parent_only=True, seen=seen):
                        changed |= self._add(pid, st)
                        del new[pid]
                        grew = True
            found = {
                pid: how
                for pid in new
                if pid not in tried
                for how in [self._proof(pid, new[pid], parent_only=False, seen=seen)]
                if how
            }
            tried.update(new)
            for pid, how in found.items():
                changed |= self._add(pid, new.pop(pid), how)
            if not found:
                break
        return changed

    def _refresh(self) -> bool:
        """Read every live member again: exits, orphans to reap, and what it runs now; whether a name changed."""
        # Names change after exec (bash -> python) and DataLoader workers rename themselves: refresh comm.
        # A different start time means the pid was reused: ours is gone.
        changed = False
        me = os.getpid()
        for t in list(self.procs.values()):
            if not t.alive:
                continue
            st = procfs.read_stat(t.pid)
            if st is not None and st.starttime == t.start:
                t.cpu = st.cpu
            if st is None or st.starttime != t.start:
                self.mark_exited(t.pid, None, None)
            elif st.state in ("Z", "X") and st.ppid == me and t.pid != self.root and self._reap:
                # An orphan re-parented to memscope (the subreaper): collect its status, free its slot.
                code, sig = decode_wait_status(self._reap(t.pid))
                self.mark_exited(t.pid, code, sig)
            elif st.comm != t.info.name:
                self._renamed(t, st)
                changed = True
        return changed

    def _renamed(self, t: Tracked, st: procfs.Stat) -> None:
        """``t``'s name changed: read what it runs now, to be announced again."""
        cmd = procfs.read_cmdline(t.pid) or list(t.info.cmdline)
        if tuple(cmd) != t.info.cmdline and t.forked:
            # It exec'd after we saw it forked: its memory is its own now, not its parent's.
            t.forked = False
            with self._carry_lock:
                if self._carry.age(t.pid, 0.0) is None:
                    self._carry.forget(t.pid)
        t.info = ProcInfo(t.pid, st.ppid, st.comm, tuple(cmd))
        t.announced = False  # exec'd: record what it runs now

    def _prune(self) -> None:
        if self._dirty:
            self._reclassify()  # announce (ProcessSeen) before forgetting
        for pid in [p for p, t in self.procs.items() if not t.alive]:
            self._drop(pid)

    def adopt(self, pid: int, ppid: int, argv: list[str], runs_script: bool) -> str | None:
        """A process that said hello through the agent. ``pid`` comes from the kernel (SO_PEERCRED), never from
        the message; it is tracked only if the kernel proves it is part of the run (returns the proof, or None:
        refused). One already gone (short-lived, between two discovery rounds) is kept as exited: it can never
        be signalled."""
        with self._lock:
            known = self.procs.get(pid)
            proof: str | None = "known"
            if known is not None and known.alive and self._reused(known):
                self.mark_exited(pid, None, None)  # its pid was reused: the one saying hello is someone else
                known = self.procs.get(pid)
            if known is not None and known.alive:
                # Discovery may have caught it between fork and exec (still "bash"): take what it is now.
                known.info = ProcInfo(
                    pid,
                    known.info.ppid,
                    known.info.name if known.info.cmdline == tuple(argv) else "python",
                    tuple(argv),
                )
            elif pid in self._gone:
                return "known"
            else:
                st = procfs.read_stat(pid)
                if st is None:
                    if known is None:
                        parent = ppid if ppid in self.procs else 0
                        self.procs[pid] = Tracked(pid, -1, ProcInfo(pid, parent, "python", tuple(argv)), alive=False)
                    proof = "gone"
                else:
                    proof = self._proof(pid, st, parent_only=False)
                    if proof is None and self._membership is not None and self._membership.descends(pid, st):
                        proof = "ancestry"
                    if proof is None:
                        if len(self.refused) < 20:
                            self.refused.append({"pid": pid, "claimed_pid": None, "name": st.comm})
                        return None
                    self._add(pid, st, proof)
            tracked = self.procs.get(pid)
            if tracked is not None and argv:
                tracked.agent_argv = tuple(argv)
            if runs_script and self.agent_main is None:
                self.agent_main = pid
                self._reclassify()
            else:
                self._dirty = True  # roles settle at the next round (settle()): one pass for many hellos
            return proof

    @staticmethod
    def _reused(t: Tracked) -> bool:
        st = procfs.read_stat(t.pid)
        return st is not None and t.start >= 0 and st.starttime != t.start

    def members(self) -> dict[int, int]:
        """pid -> start time of every live process of the run that may be signalled. An orphan known only by
        being re-parented to memscope is left out where that does not prove it is the run's (see
        ``Membership.signal_orphans``)."""
        signal_orphans = self._membership is None or self._membership.signal_orphans
        with self._lock:
            return {
                p: t.start
                for p, t in self.procs.items()
                if t.alive and t.start >= 0 and (signal_orphans or t.proof != "reparented")
            }

    def unsignalled(self) -> list[int]:
        """Live processes watched as the run's but never signalled (orphans not proven to be the run's)."""
        members = self.members()
        with self._lock:
            return [p for p, t in self.procs.items() if t.alive and p not in members]

    def alive_pids(self) -> list[int]:
        """The pids of the run's live processes."""
        with self._lock:
            return [p for p, t in self.procs.items() if t.alive]

    def mark_exited(self, pid: int, code: int | None, signal_name: str | None) -> None:
        """Record that ``pid`` exited (once; a known status is never overwritten by an unknown one)."""
        with self._lock:
            t = self.procs.get(pid)
            if t is None:
                return
            # Seen gone first (status unknown), its status may come later (the waiter's wait4): record that too.
            if not t.alive and (t.exit_known or (code is None and signal_name is None)):
                return
            t.alive = False
            t.exit_known = code is not None or signal_name is not None
            if (code or signal_name in _FAILURE_SIGNALS) and t.failed_at is None:
                t.failed_at = time.time()
            if self._dirty:
                self._reclassify()  # its ProcessSeen goes out before its ProcessExited
            parent = self.procs.get(t.info.ppid)
            with self._carry_lock:
                if self._carry.forget(pid, t.info.ppid if parent is not None and parent.alive else None):
                    self.pss_wanted = True  # its parent's last reading may lack its share: read again soon
        self._emit(ProcessExited(self._clock(), pid, code, signal_name))
        with self._lock:
            self._drop(pid)

    def _drop(self, pid: int) -> None:
        """Forget an exited process once its ProcessExited went out (the record keeps it): a run that forks 50
        processes a second must not grow memscope. Kept: the root (its status comes later, from wait4) and the
        processes the roles of the others hang on."""
        t = self.procs.get(pid)
        if t is None or t.alive or pid == self.root or pid == self.agent_main or t.role in KEEP_ROLES:
            return
        if pid in self._former_mains:
            # A stage that was the main: weighed again at the end (a pipe's first end may have done the work).
            while len(self._former_mains) > KEEP_FORMER_MAINS:
                old, _ = self._former_mains.popitem(last=False)
                if old != pid:
                    self._forget(old)
            return
        self._forget(pid)

    def _forget(self, pid: int) -> None:
        t = self.procs.get(pid)
        if t is None or t.alive or pid == self.root or pid == self.agent_main or t.role in KEEP_ROLES:
            return
        del self.procs[pid]
        self._hints.pop(pid, None)
        self._former_mains.pop(pid, None)
        if t.start >= 0:
            self._gone[pid] = t.start


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` is alive (zombies count as gone); returns the survivors."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left:
        left = [p for p in left if alive(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return left


def alive(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie is not; /proc out of reach is no proof that it is gone)."""
    try:
        st = procfs.read_stat(pid)
    except OSError:  # procfs.Unreadable: memscope is out of descriptors; not proven gone
        return True
    return st is not None and st.state not in ("Z", "X")
