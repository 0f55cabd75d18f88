"""A run's live state for views: the latest of everything (``Snapshot``) and the subscribers to its records.

A slow subscriber never slows the collectors: each has its own thread and a bounded queue that drops its oldest.
"""

from __future__ import annotations

import collections
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..model import Event, HostSample, ProcessExited, ProcessSeen, Record, TreeSample

SNAPSHOT_EXITED = 200  # exited processes the live snapshot keeps (the record keeps them all)


@dataclass
class Snapshot:
    """The latest of everything, for views that poll instead of subscribing."""

    t: float = 0.0
    procs: dict[int, dict[str, Any]] = field(default_factory=dict)  # pid -> role, name, rss, pss, alive
    tree_rss: int = 0
    tree_pss: int | None = None
    peak_rss: int = 0
    peak_pss: int | None = None
    host: HostSample | None = None
    _exited: collections.deque[int] = field(default_factory=collections.deque, repr=False)

    def update(self, rec: Record, root_pid: int) -> None:
        """Fold one record in (called for every record the run publishes)."""
        if isinstance(rec, TreeSample):
            self.t = rec.t
            for p in rec.procs:
                d = self.procs.setdefault(p.pid, {"role": "other", "name": "", "alive": True})
                if p.rss or "rss" not in d:  # a zombie reads 0: keep its last real figure in the table
                    # One moment per row: RSS, private and PSS (measured, or carried to this round) together.
                    d.update(rss=p.rss, private=p.private, pss=p.est_pss, t=rec.t)
                    d["peak_rss"] = max(d.get("peak_rss") or 0, p.rss)
                    if p.est_pss is not None:
                        d["peak_pss"] = max(d.get("peak_pss") or 0, p.est_pss)
                if p.pss is not None:
                    d.update(pss_measured=p.pss, pss_t=rec.t, swap=p.swap, anon=p.anon, file=p.file)
            if rec.kind == "rss":
                self.tree_rss = rec.rss_total
                self.peak_rss = max(self.peak_rss, self.tree_rss)
            total = rec.est_total if rec.procs else None
            if total is not None:
                self.tree_pss = total
                self.peak_pss = max(self.peak_pss or 0, total)
        elif isinstance(rec, HostSample):
            self.host = rec
        elif isinstance(rec, Event) and rec.kind == "fault" and rec.pid in self.procs:
            from ..analysis.exit_cause import fault_signal  # loaded while the run goes (finish.load_analyses)

            d = self.procs[rec.pid]
            d["exit_signal"] = d.get("exit_signal") or fault_signal((rec.data or {}).get("text"))
        elif (
            isinstance(rec, Event)
            and rec.kind == "dataset_objects"
            and rec.pid is not None
            and isinstance(rec.data, dict)
        ):
            # A DataLoader worker's census of its Dataset: what copy-on-read would be named by, at hand live.
            from ..analysis.copy_on_read import attribute_rows  # loaded while the run goes (finish.load_analyses)

            rows = attribute_rows(rec.data)
            d = self.procs.setdefault(rec.pid, {"role": "other", "name": "", "alive": True})
            d["dataset_objects"] = rows[0] if rows else None
        elif isinstance(rec, ProcessSeen):
            d = self.procs.setdefault(rec.pid, {"alive": True})
            d.update(role=rec.role, name=rec.name, cmdline=rec.cmdline)
        elif isinstance(rec, ProcessExited):
            d = self.procs.setdefault(rec.pid, {"role": "other", "name": ""})
            if d.get("alive", True):
                self._exited.append(rec.pid)
            # A worker is not memscope's child: its status is unseen, and its faulthandler dump (a "fault" event,
            # before or after this) names the signal instead.
            d.update(
                alive=False, exit_code=rec.exit_code, exit_signal=rec.exit_signal or d.get("exit_signal"), exit_t=rec.t
            )
            # A run that forks 50 processes a second: the live table keeps the latest exits, the record all.
            while len(self._exited) > SNAPSHOT_EXITED:
                old = self._exited.popleft()
                if old != root_pid and not self.procs.get(old, {}).get("alive", False):
                    self.procs.pop(old, None)

    def main_pid(self, root_pid: int) -> int:
        """The live main process (its role says so), else the root."""
        for pid, d in list(self.procs.items()):
            if d.get("role") == "main" and d.get("alive", True):
                return pid
        return root_pid


class Subscribers:
    """The run's subscribers, each fed on a thread of its own."""

    def __init__(self) -> None:
        self._subs: list[_Subscriber] = []
        self._lock = threading.Lock()

    def add(self, fn: Callable[[Record], None], maxsize: int) -> Callable[[], None]:
        """Start feeding ``fn``; returns the function that stops it."""
        sub = _Subscriber(fn, maxsize)
        with self._lock:
            self._subs.append(sub)
        sub.start()

        def unsubscribe() -> None:
            with self._lock:
                if sub in self._subs:
                    self._subs.remove(sub)
            sub.close()

        return unsubscribe

    def put(self, rec: Record) -> None:
        """Queue ``rec`` for every subscriber."""
        with self._lock:
            subs = list(self._subs)
        for s in subs:
            s.put(rec)

    def close(self) -> None:
        """The run ended: each subscriber gets what is queued, then stops."""
        with self._lock:
            subs = list(self._subs)
        for s in subs:
            s.close(drain=True)


class _Subscriber:
    def __init__(self, fn: Callable[[Record], None], maxsize: int) -> None:
        self._fn = fn
        self._q: queue.Queue[Record | None] = queue.Queue(maxsize)
        self._thread = threading.Thread(target=self._loop, name="memscope-subscriber", daemon=True)
        self.dropped = 0

    def start(self) -> None:
        self._thread.start()

    def put(self, rec: Record | None) -> None:  # None: the end
        while True:
            try:
                self._q.put_nowait(rec)
                return
            except queue.Full:
                try:
                    self._q.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self, drain: bool = False) -> None:
        self.put(None)
        if drain and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            rec = self._q.get()
            if rec is None:
                return
            try:
                self._fn(rec)
            except Exception:
                pass
