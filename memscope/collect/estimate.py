"""PSS at the RSS rate: each process's last PSS reading carried forward by the change of its private memory.

PSS (smaps_rollup) is the truth for a forked tree, but it costs 0.5-14 ms a process, so on a training tree its
rounds come every 2 s at best and every 10-28 s under the CPU budget. statm costs ~0.01 ms and gives, every
round, ``resident - shared``: the process's anonymous resident memory ("private" here). Between two PSS rounds:

    est_pss(t)     = pss(t0)                + private(t) - private(t0)
    est_private(t) = anon_pss(t0) + swap(t0) + private(t) - private(t0)

where t0 is the process's last PSS round, whose statm is read together with its smaps_rollup. Why this is sound:
what a training allocates or frees between two PSS rounds is anonymous memory of one process, counted whole in
both its private and its PSS; what private does not see (file pages mapped or dropped, copy-on-write pages newly
shared or unshared) is what the next PSS round corrects. ``est_pss`` is clamped to [0, rss]: PSS never exceeds RSS.

A process without a PSS reading yet starts from a base too. A fork that did not exec (DataLoader workers, the
forkserver's children) shares its parent's pages: at fork the tree's PSS does not change, so it contributes only
what it adds after the fork. Its private memory at birth is its parent's at that moment (fork copies the page
tables, and the counters with them), so the base is the parent's private memory at the child's start time, from a
few seconds of history kept per process (``private_around``): what the child allocated before discovery found it is
counted, unless the parent's memory moved around the fork and the two cannot be told apart. Any other
new process (an exec) contributes its whole private memory; its file-backed pages appear at its first PSS round.

When a process exits, the pages it shared do not leave the tree: the processes still mapping them now hold its
share of them (a page's shares always add up to one page). Each PSS reading keeps the process's shared share
(PSS - USS, and its anonymous part), and at its exit that share goes to its parent: without this, every epoch's
DataLoader workers, exiting, took their share of the dataset and of the main's pages out of the tree's total
until the next PSS round.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

HISTORY = 32  # private-memory readings kept per process (~6 s at the default 0.2 s): a fork's base at birth


@dataclass
class _Base:
    pss: int
    private_pss: int  # anonymous PSS + swap at the reading
    private_at: int  # statm private at the reading
    measured: bool  # False: not yet read by a PSS round (a starting guess)
    t: float
    shared: int = 0  # PSS - USS at the reading: its share of pages others map too
    anon_shared: int = 0  # the anonymous part of it


class PssCarry:
    """Per-process bases for the carried estimate. Not thread-safe: the tree sampler holds its lock around it."""

    def __init__(self) -> None:
        self._base: dict[int, _Base] = {}
        self._hist: dict[int, deque[tuple[float, int]]] = {}
        self._handed: dict[int, list[tuple[float, int, int]]] = {}  # heir -> (t, shared, anon_shared) received

    def observe(self, pid: int, t: float, private: int) -> None:
        """Every RSS round's private reading (kept briefly, for the base of a fork of this process)."""
        h = self._hist.get(pid)
        if h is None:
            h = self._hist[pid] = deque(maxlen=HISTORY)
        h.append((t, private))

    def private_around(self, pid: int, t: float) -> int | None:
        """The larger of ``pid``'s private readings just before and just after time ``t`` (its nearest one if ``t``
        is outside its history); None if it has none.

        A fork's base: the child inherits its parent's counters at birth, somewhere between those two readings.
        Too low a base counts the pages it shares whole (a main that builds a 160 MiB dataset and forks 4 workers
        between two readings: +170 % for a round); too high a base misses what the child allocated before it was
        first seen (bounded, and the PSS round its birth asks for corrects it). So the higher one."""
        h = self._hist.get(pid)
        if not h:
            return None
        i = bisect_right([x[0] for x in h], t)
        return max(h[j][1] for j in (i - 1, i) if 0 <= j < len(h))

    def measured(
        self,
        pid: int,
        t: float,
        pss: int,
        anon_pss: int,
        swap: int,
        private: int,
        shared: int = 0,
        anon_shared: int = 0,
        alive: bool = False,
    ) -> None:
        """A PSS round read ``pid``: this is the new base. A process already forgotten (it exited while the round
        read it) is not brought back: under churn that would keep a base per process ever seen. ``alive``: the
        caller knows it is still alive, so it is taken even if no RSS round saw it yet (a worker the PSS round's
        own discovery found: dropping its reading lost its share of the dataset, -18 % until the next round)."""
        if alive or pid in self._hist or pid in self._base:
            # Shares handed over by processes that exited after this reading was taken are not in it yet.
            late = [h for h in self._handed.pop(pid, ()) if h[0] >= t]
            if late:
                self._handed[pid] = late
            self._base[pid] = _Base(
                pss + sum(h[1] for h in late),
                anon_pss + swap + sum(h[2] for h in late),
                private,
                True,
                t,
                shared,
                anon_shared,
            )

    def known(self, pid: int) -> bool:
        """Whether ``pid`` has a base (a PSS reading, or a starting guess from ``first_seen``)."""
        return pid in self._base

    def first_seen(
        self, pid: int, t: float, private: int, parent: int | None = None, born: float | None = None
    ) -> bool:
        """A process seen for the first time (before any PSS reading of it). ``parent``: the tracked process it
        forked from without exec; ``born``: its start time on the same clock as ``t``. Returns whether it was new."""
        if pid in self._base:
            return False
        at = 0
        if parent is not None:
            at = private
            if born is not None:
                p = self.private_around(parent, born)
                if p is not None:
                    at = min(p, private)
        self._base[pid] = _Base(0, 0, at, False, t)
        return True

    def estimate(self, pid: int, rss: int, private: int) -> tuple[int, int]:
        """(est_pss, est_private) for a process whose statm reads (rss, private) now."""
        b = self._base.get(pid)
        if b is None:  # never introduced (should not happen): count it whole, like an exec
            return min(private, rss), private
        d = private - b.private_at
        est = b.pss + d
        return (0 if est < 0 else rss if est > rss else est), max(0, b.private_pss + d)

    def age(self, pid: int, now: float) -> float | None:
        """Seconds since the PSS reading the estimate is carried from; None if there has been none."""
        b = self._base.get(pid)
        return None if b is None or not b.measured else max(0.0, now - b.t)

    def forget(self, pid: int, heir: int | None = None) -> bool:
        """``pid`` exited; ``heir`` (its parent, if still watched) takes over its share of the pages it shared.

        What decides is the last moment ``pid`` was seen alive (its last statm or PSS reading). A reading of the heir
        taken before it does not hold the share: the share is added to it, now or when the reading is committed
        (``measured``). A reading taken after it may already hold the share (the kernel moved it at the exit),
        and gets nothing: the next round corrects a miss, while a share counted twice reads as a spike (seen:
        +169 MiB for the rest of a HF Trainer run, whose eval workers exited just before a PSS round). Returns True
        in that case: the caller asks for the next PSS round as soon as its budget allows."""
        b = self._base.pop(pid, None)
        h = self._hist.pop(pid, None)
        self._handed.pop(pid, None)
        base = self._base.get(heir) if heir is not None else None
        if b is None or base is None or not (b.shared or b.anon_shared):
            return False
        alive = max(h[-1][0] if h else -math.inf, b.t if b.measured else -math.inf)
        handed = base.measured and base.t <= alive
        if handed:
            base.pss += b.shared
            base.private_pss += b.anon_shared
        log = self._handed.setdefault(heir, [])  # type: ignore[arg-type]
        log.append((alive, b.shared, b.anon_shared))
        del log[:-HISTORY]
        return not handed

    def __len__(self) -> int:
        return len(self._base)
