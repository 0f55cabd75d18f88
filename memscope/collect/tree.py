"""The tree sampler: finds every process of the run and measures it.

Membership: descendants of the root by parentage, plus every process that carries the run's marker in its
environment (so a process that double-forked out of the session is still found), and once a process is known
it stays known until it exits even if it is re-parented to init. (pid, start time) pairs guard against pid reuse.

Two kinds of rounds: ``rss_round`` reads statm (~0.01 ms a process) and runs often; ``pss_round`` reads
smaps_rollup (0.5-14 ms a process) and runs every second or two on its own thread. Every round carries each
process's PSS at that moment (``estimate.py``): measured in PSS rounds, carried forward by the change of the
process's private memory in RSS rounds. That fast series is what the chart, "now" and the leak verdict read.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Callable, Protocol

from ..fmt import decode_wait_status
from ..model import ProcessExited, ProcessSeen, ProcMem, Record, TreeSample
from ..redact import redact_argv
from . import roles as roles_mod
from .estimate import PssCarry
from .platform import procfs
from .roles import ProcInfo

# Deaths that are a failure of the process itself (not a stop: SIGINT/SIGTERM/SIGKILL may be memscope's own).
_FAILURE_SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL")
FOREIGN_RECHECK_S = 2.0  # how often discovery reads again the processes it found not to be ours
_KEEP_BASES_ROUNDS = 3  # torn PSS rounds in a row whose readings are not taken as bases (then one is)


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


class TreeSampler:
    """Finds every process of the run and measures it, round after round (see the module's docstring)."""

    def __init__(
        self,
        root: int,
        emit: Callable[[Record], None],
        clock: Callable[[], float],
        marker: bytes | None = None,
        script: str | None = None,
        membership: MembershipRule | None = None,
        reap: Callable[[int], int | None] | None = None,
    ) -> None:
        self.root = root
        self._emit = emit
        self._clock = clock
        self._marker = marker
        self._script = script
        self._membership = membership
        self._reap = reap
        self._lock = threading.RLock()
        self.procs: dict[int, Tracked] = {}
        self._foreign: dict[int, int] = {}  # pid -> start time of processes checked and found not ours
        self._gone: dict[int, int] = {}  # pid -> start time of members exited, recorded and dropped
        self._listed: set[int] = set()  # the pids in /proc at the last discovery
        self._foreign_checked = -1e18  # time.monotonic() of the last full check of foreign pids
        self.agent_main: int | None = None
        self._hints: dict[int, str] = {}
        self._former_mains: OrderedDict[int, None] = OrderedDict()  # pids once "main", most recent last
        self._dirty = False
        self.refused: list[dict[str, object]] = []  # agents whose membership could not be proven (first 20)
        self._boot = procfs.boot_time()
        self._carry = PssCarry()
        self._carry_lock = threading.Lock()
        self.pss_wanted = False  # a PSS round should come as soon as the budget allows
        self._pss_kept = 0  # torn PSS rounds in a row whose bases were not committed
        with self._lock:
            self._add(root)
            self._reclassify()

    # -- membership ------------------------------------------------------------------------------------------
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
            changed = False
            new: dict[int, procfs.Stat] = {}
            pids = procfs.list_pids()
            now = time.monotonic()
            recheck = full or now - self._foreign_checked >= FOREIGN_RECHECK_S
            if recheck:
                self._foreign_checked = now
            listed, foreign, gone = self._listed, self._foreign, self._gone
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
            # Parentage to a fixed point (a new child of a new child), then the kernel's other proofs (session,
            # environment marker, re-parented orphan) once for what is left; what they find may have children.
            # Every stat above was read before any parent's is read again below (``child_of_member``).
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
            for pid, st in new.items():
                foreign[pid] = st.starttime
            live = self._listed = set(pids)
            for d in (foreign, gone):
                for pid in [p for p in d if p not in live]:
                    del d[pid]  # bounded by the processes that exist now
            # Names change after exec (bash -> python) and DataLoader workers rename themselves: refresh comm.
            # A different start time means the pid was reused: ours is gone.
            me = os.getpid()
            for t in list(self.procs.values()):
                if t.alive:
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
                        cmd = procfs.read_cmdline(t.pid) or list(t.info.cmdline)
                        if tuple(cmd) != t.info.cmdline and t.forked:
                            # It exec'd after we saw it forked: its memory is its own now, not its parent's.
                            t.forked = False
                            with self._carry_lock:
                                if self._carry.age(t.pid, 0.0) is None:
                                    self._carry.forget(t.pid)
                        t.info = ProcInfo(t.pid, st.ppid, st.comm, tuple(cmd))
                        t._announced = False  # type: ignore[attr-defined]  # exec'd: record what it runs now
                        changed = True
            self._prune()
            if changed or self._dirty:
                self._reclassify()

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

    def settle(self) -> None:
        """Classify what joined since the last pass (called every sampling round)."""
        with self._lock:
            if self._dirty:
                self._reclassify()

    def hint_role(self, pid: int, role: str) -> None:
        """A role the process told us itself (through the agent): it beats any guess from outside. Only for a
        process already proven to be ours."""
        with self._lock:
            if pid not in self.procs:
                return
            self._hints[pid] = role
            self._reclassify()

    def note_exec(self, pid: int) -> None:
        """The agent of ``pid`` said its image is about to be replaced (os.exec*): its hello no longer speaks
        for what runs there. Its name and command line are read again at the next discovery."""
        with self._lock:
            t = self.procs.get(pid)
            if t is None:
                return
            t.agent_argv = None
            t.info = replace(t.info, name="")  # differs from any comm: the next discovery re-reads the cmdline
            self._dirty = True

    def note_failure(self, pid: int, wall: float) -> None:
        """``pid`` failed at ``wall`` (time.time()): an uncaught exception or a fatal signal recorded inside it.
        The first failure counts: it weighs in the choice of the main (the stage that failed, not one that
        exited 0 before it or after it)."""
        with self._lock:
            t = self.procs.get(pid)
            if t is not None and (t.failed_at is None or wall < t.failed_at):
                t.failed_at = wall
                self._dirty = True

    def note_phase(self, pid: int) -> None:
        """``pid``'s agent reported a training phase or epoch: that process runs the training loop."""
        with self._lock:
            t = self.procs.get(pid)
            if t is not None:
                t.phases += 1
                if t.phases == 1:
                    self._dirty = True

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

    def _reclassify(self) -> None:
        self._dirty = False
        infos = {
            pid: replace(
                t.info,
                agent_argv=t.agent_argv,
                alive=t.alive,
                cpu=t.cpu,
                failed_at=t.failed_at,
                phases=t.phases,
                start=t.start,
            )
            for pid, t in self.procs.items()
        }
        roles = roles_mod.classify(infos, self.root, self._script, self.agent_main)
        roles.update({pid: r for pid, r in self._hints.items() if pid in roles})
        t_now = self._clock()
        for pid, t in self.procs.items():
            role = roles.get(pid, "other")
            if role == "main":
                self._former_mains.pop(pid, None)
                self._former_mains[pid] = None
            if role != t.role or not getattr(t, "_announced", False):
                t.role = role
                t._announced = True  # type: ignore[attr-defined]
                # Secrets on the command line (--token …) go no further: not to the record, nor to a live view.
                cmd = " ".join(redact_argv(t.info.cmdline))
                self._emit(ProcessSeen(t_now, pid, t.info.ppid, role, t.info.name, cmd, t.create_time))

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

    # -- measuring -------------------------------------------------------------------------------------------
    def rss_round(self) -> TreeSample:
        """One RSS round (statm) over the tree, published as a TreeSample."""
        # Read every process first, then estimate: a process found gone hands its share of shared pages to its
        # parent (``mark_exited``), and the parent's estimate must come after that, in the same round, or the
        # tree's total dips for a round at every DataLoader worker's exit.
        t_now = self._clock()
        read = []
        for pid in self.alive_pids():
            m = procfs.read_statm(pid)
            if m is None or m[0] == 0:
                st = procfs.read_stat(pid)
                t = self.procs.get(pid)
                if st is None or (t is not None and st.starttime != t.start) or st.state in ("Z", "X"):
                    code, sig = decode_wait_status(st.exit_code if st and st.state in ("Z", "X") else None)
                    self.mark_exited(pid, code, sig)
                    continue
                if m is None:
                    continue
            read.append((pid, m[0], max(0, m[0] - m[1])))
        out = []
        with self._carry_lock:
            for pid, rss, private in read:
                if not self._carry.known(pid):
                    tr = self.procs.get(pid)
                    if tr is not None and tr.forked:
                        # A fork: its base is the higher of the parent's readings around its birth, a guess where
                        # the parent's memory moved around the fork; the first PSS round after it ends the guess
                        # (it also reads a fork born while the last round ran, which measured its parent only).
                        # Forks come in bursts (a DataLoader's workers at each epoch): one round a burst.
                        born = t_now - (procfs.uptime() - tr.start / procfs.CLK_TCK)
                        self._carry.first_seen(pid, t_now, private, tr.info.ppid, born)
                        self.pss_wanted = True
                    else:
                        self._carry.first_seen(pid, t_now, private)
                self._carry.observe(pid, t_now, private)
                est, est_private = self._carry.estimate(pid, rss, private)
                out.append(ProcMem(pid, rss, private=private, est_pss=est, est_private=est_private))
        s = TreeSample(t_now, "rss", tuple(out))
        self._emit(s)
        return s

    def pss_round(self) -> TreeSample:
        """One PSS round (smaps_rollup) over the tree, published as a TreeSample."""
        # Processes forked since the last discovery share their parent's pages: measured without them, the parent's
        # PSS drops by their share and nobody counts it. Discover first; a fork that still slips through asks for
        # another round (``pss_wanted``).
        self.discover()
        out = []
        bases = []
        torn = False
        self.pss_wanted = False
        pids = self.alive_pids()
        for pid in pids:
            m = procfs.read_statm(pid)  # read with smaps_rollup: the base the RSS rounds carry PSS from
            d = procfs.read_smaps_rollup(pid)
            if d is None:
                torn |= m is not None and not _alive(pid)  # it exited while the round read the others
                continue
            # Proportional figures throughout, so that they add up over a forked tree (Pss = anon + file).
            pss = d.get("Pss", 0)
            anon = d.get("Pss_Anon", d.get("Anonymous", 0))
            file_ = d["Pss_File"] + d.get("Pss_Shmem", 0) if "Pss_File" in d else max(0, pss - anon)
            swap = d.get("SwapPss", d.get("Swap", 0))
            private = max(0, m[0] - m[1]) if m else None
            if private is not None:
                # USS = Private_Clean + Private_Dirty; anonymous private pages are dirty ones.
                uss = d.get("Private_Clean", 0) + d.get("Private_Dirty", 0)
                anon_own = min(anon, d.get("Private_Dirty", anon))
                bases.append((pid, self._clock(), pss, anon, swap, private, max(0, pss - uss), max(0, anon - anon_own)))
            out.append(
                ProcMem(
                    pid,
                    d.get("Rss", 0),
                    pss,
                    anon,
                    file_,
                    d.get("Swap", 0),
                    private=private,
                    est_pss=pss,
                    est_private=anon + swap,
                )
            )
        # All bases at once: an RSS round in the middle of this one would otherwise add processes already re-read
        # to processes not yet re-read. When a fork appears, the parent's PSS falls by what the children now
        # share, and the children's rises by it: half of that change is a dip (seen: -120 MiB on a HF Trainer).
        # A process that exited in the middle of the round leaves it torn: those read before its exit lack the
        # share of the pages it mapped with them, and nobody holds it (seen: a HF Trainer tree 200 MiB low for
        # 2 s under load, its eval workers exiting mid-round). So does a fork born during the round: those read
        # after its birth lack its share, and it was not read (seen: the same tree 70 MiB low for 1.5 s, an eval
        # worker forked while a slow round read the main). The bases stay as they were (exits hand their shares
        # over to them, a fork's base is its parent's), and the next round comes as soon as the budget allows;
        # but not for ever: under constant churn a torn round is fresher than bases kept for three rounds.
        self.discover()
        listed = set(pids)
        with self._lock:
            torn |= any(t.alive and t.forked and pid not in listed for pid, t in self.procs.items())
        if torn and self._pss_kept < _KEEP_BASES_ROUNDS:
            self._pss_kept += 1
            self.pss_wanted = True
            bases = []
        else:
            self._pss_kept = 0
        with self._carry_lock:
            for b in bases:
                self._carry.measured(*b, alive=self._is_member(b[0]))
        s = TreeSample(self._clock(), "pss", tuple(out))
        self._emit(s)
        return s

    def pss_age(self, pid: int) -> float | None:
        """Seconds since ``pid``'s last PSS reading (what its carried PSS stands on); None if never read."""
        with self._carry_lock:
            return self._carry.age(pid, self._clock())

    def all_marked(self) -> list[int]:
        """Every live process of the run, including escapees never seen before: used to stop the whole tree."""
        self.discover(full=True)
        return self.alive_pids()


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of ``pids`` is alive (zombies count as gone); returns the survivors."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left:
        left = [p for p in left if _alive(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return left


def _alive(pid: int) -> bool:
    try:
        st = procfs.read_stat(pid)
    except OSError:  # procfs.Unreadable: memscope is out of descriptors; not proven gone
        return True
    return st is not None and st.state not in ("Z", "X")


def alive(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie is not; /proc out of reach is no proof that it is gone)."""
    return _alive(pid)
