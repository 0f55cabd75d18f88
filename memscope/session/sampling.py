"""A run's sampling loops: RSS rounds with discovery and host reads, PSS rounds within a CPU budget, and the
cgroup the main process lives in. When /proc cannot be read the loops say so once per episode, never per round.
"""

from __future__ import annotations

import threading
import time

from ..collect import host as host_mod
from ..collect import procfs
from ..collect.procfs import Unreadable
from ..model import Event, HostSample, TreeSample
from .stacks import StackTaker
from .state import RunState

PSS_CPU_BUDGET = 0.015  # the PSS thread's share of one core at most (benchmarks/collector_cpu.py measures it)


class Sampler:
    """The RSS and PSS loops of one run (each on a thread of its own), and the host and cgroup readings."""

    def __init__(self, run: RunState, stack_taker: StackTaker) -> None:
        self.run = run
        self.stack_taker = stack_taker  # its watches look at every RSS round
        self.done = threading.Event()  # set at the end: the loops return
        self.cg: host_mod.Cgroup | None = None
        self._cgf = host_mod.CgroupFollower()
        self._warned: set[str] = set()  # degradations already said once (descriptors, unreadable PSS)
        self._episodes = 0

    def rss_loop(self) -> None:
        """Discovery, RSS rounds and host samples until the run ends."""
        run, o = self.run, self.run.options
        next_discover = next_host = 0.0
        while not self.done.is_set():
            start = run.elapsed()
            try:
                if start >= next_discover:
                    run.tree.discover()
                    next_discover = start + o.discover_interval_s
                sample = run.tree.rss_round()
                run.tree.settle()
                self.stack_taker.after_round(sample)
                self.follow_cgroup()
                if start >= next_host:
                    if self.cg is None:
                        self.cg = host_mod.find_memory_cgroup()
                    self.host_sample(self.cg)
                    next_host = start + o.host_interval_s
                self._degraded_over("descriptors")
            except Unreadable as exc:  # out of descriptors: the round is lost, no process is taken for gone
                self._degraded("descriptors", exc)
            except Exception as exc:  # a sampler bug must not end the watch
                run.publish(Event(run.elapsed(), None, "collector_error", {"where": "rss", "error": repr(exc)}))
            self.done.wait(max(0.0, o.interval_s - (run.elapsed() - start)))

    def follow_cgroup(self) -> None:
        """Notice the main process moving to another cgroup (its counters are then read from the new one)."""
        moved = self._cgf.follow(self.run.main_pid())
        if moved is None:
            return
        cg, before = moved
        if before is not None:
            self.run.publish(Event(self.run.elapsed(), None, "cgroup_changed", {"from": before.path, "to": cg.path}))
        self.cg = cg
        self.host_sample(cg)  # the new counter's first reading: its rise is counted from here

    def _degraded(self, what: str, exc: OSError) -> None:
        """Say once per episode that memscope could not see (the summary lists it), not once per round."""
        if what in self._warned:
            return
        self._warned.add(what)
        self._episodes += 1
        if self._episodes > 10:
            return  # a limit that flaps: the first ten episodes tell the story
        self.run.publish(
            Event(
                self.run.elapsed(),
                None,
                "collector_degraded",
                {"what": what, "error": f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc)},
            )
        )
        if self._episodes == 1:
            self.run.say(
                f"memscope: warning: cannot read /proc: {exc.strerror or exc}; samples are missing "
                "until it can again (live processes are not taken for exited)"
            )

    def _degraded_over(self, what: str) -> None:
        if what in self._warned:
            self._warned.discard(what)
            if self._episodes <= 10:
                self.run.publish(Event(self.run.elapsed(), None, "collector_recovered", {"what": what}))

    def host_sample(self, cg: host_mod.Cgroup | None) -> None:
        """One host (and cgroup) reading, published."""
        h = host_mod.read_host_memory()
        if h.total == 0:
            return  # /proc/meminfo unreadable (out of descriptors): no sample rather than "0 bytes available"
        cm = host_mod.read_cgroup_memory(cg) if cg else None
        limit = self.run.options.limit_bytes or (cm.limit if cm else None)
        self.run.publish(
            HostSample(
                self.run.elapsed(),
                h.total,
                h.available,
                h.swap_total,
                h.swap_used,
                limit,
                cm.usage if cm else None,
                h.oom_kills,
                cm.oom_kills if cm else None,
            )
        )

    def pss_loop(self) -> None:
        """PSS rounds, spaced so that they take at most PSS_CPU_BUDGET of a core."""
        run = self.run
        if self.done.wait(0.5):
            return
        while True:
            c0 = time.thread_time()
            try:
                sample = run.tree.pss_round()
                if "pss_unreadable" not in self._warned:
                    self._check_pss_readable(sample)
            except Unreadable as exc:
                self._degraded("descriptors", exc)
            except Exception as exc:
                run.publish(Event(run.elapsed(), None, "collector_error", {"where": "pss", "error": repr(exc)}))
            # smaps_rollup costs ~4 ms per torch-loaded process: on a big tree the rounds space out rather than
            # let memscope take more than PSS_CPU_BUDGET of a core from the training.
            soon = (time.thread_time() - c0) / PSS_CPU_BUDGET
            regular = max(run.options.pss_interval_s if run.elapsed() > 1 else 0.5, soon)
            # A fork that lived through that round unseen (forked while it ran) had taken its share of its
            # parent's pages, which the round did not count: then the next round comes as soon as the budget allows.
            t0 = time.monotonic()
            while True:
                left = (soon if run.tree.pss_wanted else regular) - (time.monotonic() - t0)
                if left <= 0:
                    break
                if self.done.wait(min(0.1, left)):
                    return

    def _check_pss_readable(self, sample: TreeSample) -> None:
        """Another user's process keeps smaps_rollup closed (ptrace rules): say so once, not a silent null."""
        run = self.run
        have = {p.pid for p in sample.procs}
        pid = procfs.first_denied([p for p in run.tree.alive_pids() if p not in have], "smaps_rollup")
        if pid is None:
            return
        self._warned.add("pss_unreadable")
        msg = f"PSS of pid {pid} is unreadable: permission denied (another user's process)"
        run.publish(
            Event(
                run.elapsed(),
                pid,
                "pss_unreadable",
                {
                    "reason": "permission",
                    "message": msg + "; run memscope as that user or as root. RSS is shown instead.",
                },
            )
        )
        run.say(f"memscope: warning: {msg}; showing RSS")
