"""The roles the run's processes play (main, DataLoader worker, wrapper...): what they say of themselves and how
``roles.classify`` reads the tree; a change of role is announced as a ProcessSeen.

One part of ``tree.TreeSampler`` (membership is ``tree_membership``'s, the measuring ``tree_measure``'s).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Callable

from ..model import ProcessSeen, Record
from ..redact import redact_argv
from . import roles as roles_mod
from .tree_membership import Tracked


class TreeRoles:
    """The roles' part of ``TreeSampler``: hints and notes from the agents, classification after every change."""

    root: int
    procs: dict[int, Tracked]
    agent_main: int | None
    _emit: Callable[[Record], None]
    _clock: Callable[[], float]
    _script: str | None
    _lock: threading.RLock
    _hints: dict[int, str]  # pid -> the role the process told us itself
    _former_mains: OrderedDict[int, None]  # pids once "main", most recent last
    _dirty: bool  # something joined or changed since the last classification

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
            if role != t.role or not t.announced:
                t.role = role
                t.announced = True
                # Secrets on the command line (--token …) go no further: not to the record, nor to a live view.
                cmd = " ".join(redact_argv(t.info.cmdline))
                self._emit(ProcessSeen(t_now, pid, t.info.ppid, role, t.info.name, cmd, t.create_time))
