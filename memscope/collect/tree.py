"""The tree sampler: finds every process of the run and measures it (a facade over its three parts).

Membership: descendants of the root by parentage, plus every process that carries the run's marker in its
environment (so a process that double-forked out of the session is still found), and once a process is known
it stays known until it exits even if it is re-parented to init. (pid, start time) pairs guard against pid reuse.

Two kinds of rounds: ``rss_round`` reads statm (~0.01 ms a process) and runs often; ``pss_round`` reads
smaps_rollup (0.5-14 ms a process) and runs every second or two on its own thread. Every round carries each
process's PSS at that moment (``estimate.py``): measured in PSS rounds, carried forward by the change of the
process's private memory in RSS rounds. That fast series is what the chart, "now" and the leak verdict read.

The parts, one module each: ``tree_membership`` (who is the run's: discovery, agents' hellos, exits),
``tree_roles`` (which role each plays) and ``tree_measure`` (the RSS and PSS rounds).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

from ..model import Record
from .estimate import PssCarry
from .platform import procfs
from .tree_measure import TreeMeasure
from .tree_membership import (
    FOREIGN_RECHECK_S,
    KEEP_FORMER_MAINS,
    KEEP_ROLES,
    MembershipRule,
    Tracked,
    TreeMembership,
    alive,
    wait_gone,
)
from .tree_roles import TreeRoles

__all__ = [
    "FOREIGN_RECHECK_S",
    "KEEP_FORMER_MAINS",
    "KEEP_ROLES",
    "MembershipRule",
    "Tracked",
    "TreeSampler",
    "alive",
    "wait_gone",
]


class TreeSampler(TreeMembership, TreeRoles, TreeMeasure):
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
        self.procs = {}
        self._foreign: dict[int, int] = {}  # pid -> start time of processes checked and found not ours
        self._gone: dict[int, int] = {}  # pid -> start time of members exited, recorded and dropped
        self._listed: set[int] = set()  # the pids in /proc at the last discovery
        self._foreign_checked = -1e18  # time.monotonic() of the last full check of foreign pids
        self.agent_main = None
        self._hints: dict[int, str] = {}
        self._former_mains = OrderedDict()  # pids once "main", most recent last
        self._dirty = False
        self.refused = []  # agents whose membership could not be proven (first 20)
        self._boot = procfs.boot_time()
        self._carry = PssCarry()
        self._carry_lock = threading.Lock()
        self.pss_wanted = False  # a PSS round should come as soon as the budget allows
        self._pss_kept = 0  # torn PSS rounds in a row whose bases were not committed
        with self._lock:
            self._add(root)
            self._reclassify()

    def all_marked(self) -> list[int]:
        """Every live process of the run, including escapees never seen before: used to stop the whole tree."""
        self.discover(full=True)
        return self.alive_pids()
