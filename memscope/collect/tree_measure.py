"""Measuring the run's processes: RSS rounds (statm, often) and PSS rounds (smaps_rollup, every second or two).

Every round carries each process's PSS at that moment (``estimate.py``): measured in PSS rounds, carried forward by
the change of the process's private memory in RSS rounds. That fast series is what the chart, "now" and the leak
verdict read. One part of ``tree.TreeSampler`` (membership is ``tree_membership``'s, the roles ``tree_roles``').
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

from ..fmt import decode_wait_status
from ..model import ProcMem, Record, TreeSample
from .estimate import PssCarry
from .platform import procfs
from .tree_membership import Tracked, alive

_KEEP_BASES_ROUNDS = 3  # torn PSS rounds in a row whose readings are not taken as bases (then one is)


class TreeMeasure:
    """The measuring part of ``TreeSampler``: the rounds, and the PSS carried between them."""

    procs: dict[int, Tracked]
    pss_wanted: bool  # a PSS round should come as soon as the budget allows
    _emit: Callable[[Record], None]
    _clock: Callable[[], float]
    _lock: threading.RLock
    _carry: PssCarry
    _carry_lock: threading.Lock
    _pss_kept: int  # torn PSS rounds in a row whose bases were not committed

    if TYPE_CHECKING:  # the membership's part (tree_membership.TreeMembership)

        def discover(self, full: bool = False) -> None: ...

        def alive_pids(self) -> list[int]: ...

        def mark_exited(self, pid: int, code: int | None, signal_name: str | None) -> None: ...

        def _is_member(self, pid: int) -> bool: ...

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
                torn |= m is not None and not alive(pid)  # it exited while the round read the others
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
