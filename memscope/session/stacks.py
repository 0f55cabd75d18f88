"""Stacks of every process of the run, taken by memscope: on request, near the limit, and on a stall.

Each Python process's agent keeps a dump file in the run's private directory and said so in its hello. A capture
asks each proven member's agent, over its connection, to dump every thread from its reader thread: no signal, so
a wait of the program's (``signal.pause()``, a lock, I/O) is not woken. Where that thread has not answered within
``ASK_S`` (something holds the GIL: a long C call) the process may get the stacks signal (SIGURG, whose default
action is to ignore it: a process that exec'd away meanwhile is not killed), if it is a proven member (pid + start
time, through a pidfd) with a handler for it in /proc/PID/status at that moment
(``supervise.send(require_handler=True)``); one whose thread could not be asked is signalled only while running,
never asleep, and the capture says so (``_signal``). memscope
reads the dumps from the run's private directory: it writes the capture, never the process about to die. It has a
deadline (``DEADLINE_S`` for the whole tree); a process that exits meanwhile is named, not waited for. Processes
without an agent are named with their state from /proc. Nothing runs between captures: the sampling round only
compares two numbers (and, with a stall watch, reads each process's CPU time and bytes written).
"""

from __future__ import annotations

import collections
import linecache
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import supervise
from ..agent.protocol import STACKS_TAKEN
from ..collect.platform import procfs
from ..errors import StacksError
from ..model import Event, TreeSample
from .state import RunState

if TYPE_CHECKING:
    from ..analysis.stacks import Stacks


DEADLINE_S = 1.0  # the whole tree's stacks, or what came by then
ASK_S = 0.5  # an agent's reader thread has this long to answer before the process may get the signal
QUIET_S = 0.01  # a dump is complete once its file has stopped growing this long (faulthandler writes in µs)
REARM_BELOW = 0.05  # the high-water mark re-arms once the tree is this far (of the limit) below it
MIN_GAP_S = 5.0  # automatic captures at most this often
STALL_CHECK_S = 1.0  # the stall watch reads each process's CPU time this often (a stall is seconds long)
GROWTH_WINDOW_S = 5.0  # "grew fastest over the last seconds"
REQUEST = "stacks.request"  # `memscope stacks` (another process) asks by leaving this file, holding an id
MAX_DUMP = 1 << 20  # bytes read from one dump at most (faulthandler stops at 100 threads x 100 frames)


class StackTaker:
    """The stacks of one run: the agents' handlers (from their hellos), captures, and the two watches."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self.handlers: dict[int, tuple[int | None, str]] = {}  # pid (the kernel's) -> (signal or None, dump file)
        self.agents: set[int] = set()  # pids whose agent said hello
        self._lock = threading.Lock()  # one capture at a time (their dumps share nothing, but the CPU does)
        self._armed = True
        self._last_auto = -1e9
        self._busy = False
        self._closed = False  # settle(): the run is ending
        self._mem: collections.deque[tuple[float, dict[int, int]]] = collections.deque()
        # The stall watch: (time, (CPU ticks, bytes written) of the run so far) at each check, over the window;
        # each process's last reading, keyed by (pid, start time); a capture's own dumps are not progress.
        self._cpu: collections.deque[tuple[float, tuple[int, int]]] = collections.deque()
        self._acct: dict[tuple[int, int], tuple[int, int]] = {}
        self._total = (0, 0)
        self._rebase = False
        self._stall_taken = False
        self._stall_checked = -1e9
        self.last_output_t = 0.0  # when the run last printed (capture mode): set by the output readers
        self.note: str | None = None  # the status line's word about the last automatic capture

    # -- the agents ------------------------------------------------------------------------------------------
    def on_hello(self, pid: int, msg: dict[str, Any]) -> None:
        """An agent's hello: remember its dump file (a bare file name in the run's directory) and stacks signal
        (None where the program has its own use for it: then only its reader thread is asked)."""
        self.agents.add(pid)
        sig, name = msg.get("stacks_signal"), msg.get("stacks_file")
        if isinstance(name, str) and name == os.path.basename(name) and name:
            self.handlers[pid] = (sig if isinstance(sig, int) else None, name)
        else:
            self.handlers.pop(pid, None)  # a fork whose parent's registration did not carry over

    # -- capture ---------------------------------------------------------------------------------------------
    def take(
        self, reason: str = "request", deadline_s: float = DEADLINE_S, extra: dict[str, Any] | None = None
    ) -> "Stacks":
        """Every process's stacks now, recorded as a "stacks" event; returns them."""
        from ..analysis.stacks import Stacks  # loaded while the run goes (finish.load_analyses)

        run = self.run
        if run.is_ended:
            raise StacksError("the run has ended: stacks need its processes alive")
        if run.attached or run.agent_server is None:
            raise StacksError("this run has no agent (attached, or started with --no-agent): no stacks")
        with self._lock:
            if self._closed:
                raise StacksError("the run has ended: stacks need its processes alive")
            data = self._capture(reason, deadline_s)
            data.update(extra or {})
            run.publish(Event(data["t_s"], None, "stacks", data))  # under the lock: settle() waits for it
        return Stacks(data)

    def settle(self, timeout: float = 2 * DEADLINE_S) -> None:
        """The run is ending: let a capture under way reach the record (its processes may have just exited, and
        a capture that published after the record closed would be lost), and take no new one."""
        if self._lock.acquire(timeout=timeout):
            self._closed = True
            self._lock.release()
        else:
            self._closed = True

    def _capture(self, reason: str, deadline_s: float) -> dict[str, Any]:
        run = self.run
        t0, c0 = time.monotonic(), run.elapsed()
        try:
            last = self._mem[-1][1]
        except IndexError:
            last = {}
        rows, waiting = self._ask(last)
        self._wait(rows, waiting, t0, deadline_s)
        self._unanswered(rows, waiting)
        return {
            "id": secrets.token_hex(4),
            "reason": reason,
            "t_s": round(c0, 3),
            "duration_s": round(time.monotonic() - t0, 4),
            **self._memory(rows, last),
            "grew_fastest": self._grew_fastest(),
            "processes": [rows[p] for p in sorted(rows)],
        }

    def _ask(self, last: dict[int, int]) -> tuple[dict[int, dict[str, Any]], dict[int, "_Asked"]]:
        """A row per proven member (its role, name, state, memory), and each agent's thread asked for a dump:
        the processes now waited for."""
        run = self.run
        procs, server = run.tree.procs, run.agent_server
        rows: dict[int, dict[str, Any]] = {}
        waiting: dict[int, _Asked] = {}
        for pid, start in sorted(run.tree.members().items()):
            t = procs.get(pid)
            st = procfs.read_stat(pid)
            rows[pid] = {
                "pid": pid,
                "role": t.role if t else "other",
                "name": st.comm if st else (t.info.name if t else "?"),
                "state": st.state if st else "X",
                "bytes": last.get(pid),
                "threads": [],
            }
            h = self.handlers.get(pid)
            if h is None:
                rows[pid]["status"] = "no_handler" if pid in self.agents else "no_agent"
                continue
            sig, name = h
            path = os.path.join(run.agent_dir, name)
            before = _size(path)
            if before is None:
                rows[pid]["status"] = "exited" if supervise.exited(pid) else "no_handler"
                continue
            asked = server is not None and server.request(pid, {"t": "stacks"}, timeout=0.05)
            waiting[pid] = _Asked(path, before, start, sig, asked)
        return rows, waiting

    def _wait(
        self, rows: dict[int, dict[str, Any]], waiting: dict[int, "_Asked"], t0: float, deadline_s: float
    ) -> None:
        """Until the deadline: read each dump once it has stopped growing; name a process that exited; signal one
        whose thread did not answer within ASK_S (or could not be asked), once (``_signal``)."""
        seen: dict[int, tuple[int, float]] = {}  # pid -> (size, when it was last seen to grow)
        while waiting:
            now = time.monotonic()
            for pid, w in list(waiting.items()):
                size = _size(w.path) or 0
                prev = seen.get(pid)
                if size > w.before and (prev is None or prev[0] != size):
                    seen[pid] = (size, now)
                elif size > w.before and prev is not None and now - prev[1] >= QUIET_S:
                    rows[pid].update(status="ok", threads=self._read(w.path, w.before, size))
                    del waiting[pid]
                elif size <= w.before and supervise.exited(pid):
                    rows[pid]["status"] = "exited"
                    del waiting[pid]
                elif size <= w.before and w.tried is None and (not w.asked or now - t0 >= ASK_S):
                    w.tried = _signal(pid, w.start, w.sig, w.asked, w.path)  # one try
            if not waiting or now - t0 >= deadline_s:
                break
            time.sleep(0.002)

    def _unanswered(self, rows: dict[int, dict[str, Any]], waiting: dict[int, "_Asked"]) -> None:
        """At the deadline: what each process still waited for left (a partial dump), or why it gave none."""
        for pid, w in waiting.items():
            size = _size(w.path) or 0
            if size > w.before:
                rows[pid].update(status="partial", threads=self._read(w.path, w.before, size))
            elif supervise.exited(pid):
                rows[pid]["status"] = "exited"
            else:
                rows[pid]["status"] = "no_answer" if w.tried in (None, "sent") else w.tried
            if w.tried not in (None, "sent"):
                rows[pid]["wchan"] = _wchan(pid)  # where it sleeps, in the kernel's words

    def _memory(self, rows: dict[int, dict[str, Any]], last: dict[int, int]) -> dict[str, Any]:
        """The tree's memory at the capture against the run's limit, and by role."""
        run = self.run
        lim = run.limit()
        lim_bytes, lim_source = (lim["bytes"], lim["source"]) if lim else (None, None)
        tree = sum(v for v in last.values() if v)
        cg = run.snapshot.host.cgroup_usage if run.snapshot.host is not None else None
        used = max(tree, cg or 0) if lim_source == "cgroup" else tree
        roles: dict[str, int] = {}
        for r in rows.values():
            roles[r["role"]] = roles.get(r["role"], 0) + (r["bytes"] or 0)
        return {
            "tree_bytes": tree or None,
            "limit_bytes": lim_bytes,
            "limit_source": lim_source,
            "fraction": round(used / lim_bytes, 4) if lim_bytes and used else None,
            "roles": roles,
        }

    def _read(self, path: str, start: int, end: int) -> list[dict[str, Any]]:
        try:
            with open(path, "rb") as f:
                f.seek(start)
                raw = f.read(min(end - start, MAX_DUMP))
        except OSError:
            return []
        from ..analysis.stacks import main_thread, parse_dump  # loaded while the run goes (finish.load_analyses)

        # memscope's own agent thread is no part of the program's story.
        threads = [
            t
            for t in parse_dump(raw.decode("utf-8", "replace"))
            if not any("/memscope/agent/" in f["file"] or "_memscope_agent" in f["file"] for f in t["frames"][:1])
        ]
        main = main_thread(threads)
        threads.sort(key=lambda t: 0 if t is main else 1)  # the main thread first
        files = set()
        for t in threads:
            for fr in t["frames"]:
                if fr["file"] not in files:
                    files.add(fr["file"])
                    linecache.checkcache(fr["file"])  # the source as it is now, not as an earlier capture read it
                code = linecache.getline(fr["file"], fr["line"]).strip() if fr["line"] else ""
                if code:
                    fr["code"] = code[:200]
        return threads

    def _grew_fastest(self) -> dict[str, Any] | None:
        try:  # the sampling thread trims the window meanwhile
            (ta, a), (tb, b) = self._mem[0], self._mem[-1]
        except IndexError:
            return None
        if tb - ta <= 0:
            return None
        best = max(((b[p] - a[p], p) for p in b if p in a and b[p] is not None and a[p] is not None), default=None)
        if best is None or best[0] <= 0:
            return None
        t = self.run.tree.procs.get(best[1])
        return {
            "pid": best[1],
            "role": t.role if t else "other",
            "bytes_per_s": int(best[0] / (tb - ta)),
            "window_s": round(tb - ta, 2),
        }

    # -- the watches (called by every RSS round) -------------------------------------------------------------
    def after_round(self, sample: TreeSample) -> None:
        """Keep the last seconds of memory; capture once when the tree crosses its high-water mark or stalls."""
        run, o = self.run, self.run.options
        now = sample.t
        self._mem.append((now, {p.pid: (p.est_pss if p.est_pss is not None else p.rss) for p in sample.procs}))
        while self._mem and now - self._mem[0][0] > GROWTH_WINDOW_S:
            self._mem.popleft()
        if run.attached or run.agent_server is None or self._busy:
            return
        req = _take_request(os.path.join(run.agent_dir, REQUEST))
        if req is not None:
            self._auto("request", {"request": req}, automatic=False)
            return
        if o.stacks_at:
            self._near_limit(sample, now)
        if o.stall_after_s and now - self._stall_checked >= STALL_CHECK_S:
            self._stall_checked = now
            self._stall(sample, now)

    def _near_limit(self, sample: TreeSample, now: float) -> None:
        run, mark = self.run, self.run.options.stacks_at
        lim = run.limit()
        if not lim or not lim.get("bytes"):
            return
        used = sample.est_total or sample.rss_total
        h = run.snapshot.host
        if lim["source"] == "cgroup" and h is not None and h.cgroup_usage:
            used = max(used, h.cgroup_usage)  # the kernel kills on the cgroup's count (page cache included)
        frac = used / lim["bytes"]
        if lim["source"] == "host" and h is not None and h.total:
            frac = max(frac, 1 - h.available / h.total)  # the host runs out for everyone, not at the tree's size
        if not self._armed:
            if frac < mark - REARM_BELOW:
                self._armed = True
            return
        if frac >= mark and now - self._last_auto >= MIN_GAP_S:
            self._armed = False
            self._auto("near_limit", {"high_water": mark})

    def _stall(self, sample: TreeSample, now: float) -> None:
        # A stall is the run's: CPU and bytes written (/proc/PID/io wchar: prints wherever they go, captured or
        # not) of every process alive in the window, those born in it included (a training under an idle `bash`
        # or `uv` wrapper started after the window did), summed check by check into running totals.
        after = self.run.options.stall_after_s
        seen: dict[tuple[int, int], tuple[int, int]] = {}
        cpu = wrote = 0
        for p in sample.procs:
            st = procfs.read_stat(p.pid)
            if st is None:
                continue
            w = procfs.written(p.pid) or 0
            key = (p.pid, st.starttime)
            seen[key] = (st.cpu, w)
            prev = self._acct.get(key)
            if prev is not None:
                cpu, wrote = cpu + max(0, st.cpu - prev[0]), wrote + max(0, w - prev[1])
            else:  # born (or found) since the last check: all it did is new
                cpu, wrote = cpu + st.cpu, wrote + w
        first = not self._acct
        self._acct = seen
        if first or self._rebase:  # the first reading, or a capture's own dumps since: a new window from here
            self._rebase = False
            self._cpu.clear()
        else:
            self._total = (self._total[0] + cpu, self._total[1] + wrote)
        self._cpu.append((now, self._total))
        while len(self._cpu) > 2 and now - self._cpu[1][0] >= after:
            self._cpu.popleft()
        t_old, (cpu_old, wrote_old) = self._cpu[0]
        used = (self._total[0] - cpu_old) / procfs.CLK_TCK
        if used > 0.01 * after or self._total[1] > wrote_old or self.last_output_t > t_old:
            self._stall_taken = False  # it computes or writes: progress
            return
        if now - t_old < after or self._stall_taken:
            return
        self._stall_taken = True
        self._auto("stall", {"stall_after_s": after, "cpu_s": round(used, 3)})

    def _auto(self, reason: str, extra: dict[str, Any], automatic: bool = True) -> None:
        if automatic:
            self._last_auto = self.run.elapsed()
        self._busy = True

        def go() -> None:
            try:
                s = self.take(reason, extra=extra)
                if not automatic:
                    pass
                elif reason == "stall":
                    self.note = f"no progress for {extra['stall_after_s']:g} s: stacks taken"
                    self.run.say(f"memscope: {self.note}")
                else:
                    self.note = f"near the limit: stacks taken at {self.run.elapsed():.0f} s"
                del s
            except Exception as exc:  # the run ended meanwhile, or a bug: never the sampler's end
                try:
                    self.run.publish(
                        Event(self.run.elapsed(), None, "collector_error", {"where": "stacks", "error": repr(exc)})
                    )
                except Exception:
                    pass
            finally:
                self._rebase = True  # the dumps just written are the capture's, not the run's progress
                self._busy = False

        threading.Thread(target=go, name="memscope-stacks", daemon=True).start()


@dataclass
class _Asked:
    """A process a capture waits for: its dump file and the size it had before, its start time (the proof for a
    signal), its stacks signal, whether its agent's thread was asked, and the signal's try (None: not yet; "sent",
    or why not)."""

    path: str
    before: int
    start: int
    sig: int | None
    asked: bool
    tried: str | None = None


def _signal(pid: int, start: int, sig: int | None, asked: bool, dump: str) -> str:
    """The stacks signal to ``pid`` whose reader thread did not answer: "sent", or why not.

    A thread that was asked and did not answer could not take the GIL: something holds it (a long C call, running
    or blocked), so the process is in no Python-level wait such as ``signal.pause()`` (those release the GIL) and
    the signal is what can reach it. A process whose thread could not be asked (its connection is gone) gets the
    signal only while running: asleep, it may be in a wait that any caught signal ends early."""
    st = procfs.read_stat(pid)
    if st is None or st.state in ("Z", "X"):
        return "exited"
    if sig is None or os.path.exists(dump + STACKS_TAKEN):
        return "signal_taken"  # the program has its own use for the signal (at its start, or since: the mark)
    if not procfs.catches(pid, sig):
        return "no_handler"  # exec'd away from the agent
    if st.state != "R" and not asked:
        return "asleep"
    return "sent" if supervise.send(pid, start, sig, require_handler=True) else "no_handler"


def request(agent_dir: str) -> str:
    """Ask the memscope that supervises a run (another process) for its stacks: leave the request in the run's
    directory; the supervisor takes it at its next sampling round and records a "stacks" event whose
    ``request`` is the id returned. The supervisor does the signalling, with its proofs."""
    rid = secrets.token_hex(4)
    tmp = os.path.join(agent_dir, f".{REQUEST}.{rid}")
    with open(tmp, "w") as f:
        f.write(rid)
    os.replace(tmp, os.path.join(agent_dir, REQUEST))
    return rid


def _take_request(path: str) -> str | None:
    try:
        with open(path) as f:
            rid = f.read(64).strip()
        os.unlink(path)
    except OSError:
        return None
    return rid if rid.isalnum() else None


def _wchan(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read(64).strip() or None
    except OSError:
        return None


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None
