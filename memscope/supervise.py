"""The supervisor: launch the run, know which processes are its own, signal only those, reap what is ours.

Everything here rests on what the kernel says, never on what a process says about itself:

- **launch**: the command starts in its own session, so its pid is the run's session id, group id and root.
- **membership** (``Membership.proof``): a process belongs to the run if its parent does (the parent's pid *and*
  start time are a member's, read after the child's, and the child is younger: a member's pid reused by a
  stranger proves nothing for the stranger's children), if its session is the
  run's session (sessions cannot be joined, only left), if its environment carries the run's secret key (never the
  public run id) and it runs as memscope's user or the root's, or if it is
  an orphan the kernel re-parented to memscope (the CLI is the child subreaper while it supervises a run; a
  library's or notebook's process never is: it would adopt its own strangers).
  A pid an agent *claims* (in a PID namespace it is not even a host pid) is never enough.
- **signals** (``send``): a pid is signalled only after checking its start time is the one recorded when it was
  found, through a pidfd so that the check and the signal name the same process. The run's group is signalled
  only while its root is unreaped (until then the group id cannot be reused).
- **reaping**: ``os.wait4`` on the run's own pids, never ``wait(-1)``: in a notebook kernel the other children's
  statuses belong to whoever started them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Mapping, Sequence

from .collect.platform import LINUX, procfs
from .fmt import signal_name

PR_SET_CHILD_SUBREAPER = 36
_ANCESTRY_DEPTH = 64  # ppid chains are short; a bound keeps a loop of pid reuse from spinning

_lock = threading.Lock()
_subreaper_users = 0
_launched: set[int] = set()  # run roots this process started (they are our children by fork, not orphans)
_sole_launcher = False  # this process starts nothing but runs (the CLI): every orphan it gets is a run's


def _prctl_subreaper(on: bool) -> bool:
    if not LINUX:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def hold_subreaper() -> bool:
    """Make this process the child subreaper while at least one run is supervised (refcounted); only where it
    forks nothing but runs (the CLI, ``declare_sole_launcher``), so that every orphan it gets is a run's.

    In a library or a notebook kernel the flag would re-parent to the caller the orphans of all its other
    children while a run is going: its daemons were listed as the run's, and orphans that are nobody's run were
    left zombies of the caller (nothing there waits for a pid it did not start). There the caller adopts
    nothing: the run's orphans go where they would without memscope, and those already seen stay members
    (pid and start time), found again by their marker or session otherwise. Returns whether the role is held."""
    global _subreaper_users
    with _lock:
        if not _sole_launcher:
            return False
        _subreaper_users += 1
        return _prctl_subreaper(True) if _subreaper_users == 1 else True


def release_subreaper() -> None:
    """Give the subreaper role back once no run needs it."""
    global _subreaper_users
    with _lock:
        if _subreaper_users <= 0:
            return
        _subreaper_users -= 1
        if _subreaper_users == 0:
            _prctl_subreaper(False)


def declare_sole_launcher() -> None:
    """Called by the CLI: this process forks nothing but the run, so a child it did not launch is an orphan of
    the run and may be stopped with it. A notebook kernel or a library user's script starts other children that
    look the same (Popen(start_new_session=True)): there such processes are watched but never signalled."""
    global _sole_launcher
    _sole_launcher = True


def supervised_runs() -> int:
    """How many runs hold the subreaper role now."""
    with _lock:
        return _subreaper_users


def launch(
    command: Sequence[str], cwd: str | None, env: Mapping[str, str], output_files: tuple[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a session of its own (raises OSError as Popen does). ``output_files``: its stdout and
    stderr go to these files (appended to), not to a pipe: a pipe's reader is memscope, and a notebook kernel that
    dies or restarts takes it along; the training's next print then raised BrokenPipeError (measured: a run that
    outlived its kernel died at its first print after it). A file has no reader to lose."""
    fds = (
        [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600) for p in output_files]
        if output_files
        else [None, None]
    )
    try:
        proc = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            stdin=subprocess.DEVNULL if output_files else None,
            stdout=fds[0],
            stderr=fds[1],
        )
    finally:
        for fd in fds:
            if fd is not None:
                os.close(fd)
    with _lock:
        _launched.add(proc.pid)
    return proc


def forget_launched(pid: int) -> None:
    """The run's root is gone: forget its pid."""
    with _lock:
        _launched.discard(pid)


# -- membership ------------------------------------------------------------------------------------------------
class Membership:
    """How a process proves it is part of the run. ``session``: the run's session id (its root's pid) when
    memscope launched it in a session of its own; None when attached to a process it did not start."""

    def __init__(
        self, root: int, *, session: int | None, marker: bytes | None, started_ticks: int | None, reparented: bool
    ) -> None:
        self.root = root
        self.session = session
        self.marker = marker
        self.started_ticks = started_ticks  # the root's start time: an orphan of the run is younger
        # Whose processes the marker can prove: memscope's user and the root's (a run that switched users
        # keeps its descendants by parentage and session). The key is secret, this is a second lock.
        self.uids = {u for u in (os.geteuid(), _uid(root)) if u is not None}
        self.reparented = reparented and LINUX
        self.signal_orphans = _sole_launcher  # whether a re-parented orphan proves enough to be signalled

    def proof(self, pid: int, st: "procfs.Stat", child_of_member: Callable[["procfs.Stat"], bool]) -> str | None:
        """Why ``pid`` (whose /proc stat is ``st``) belongs to the run, or None. ``child_of_member(st)``: whether
        its parent is proven, by pid and start time, to be a live member (``TreeSampler.child_of_member``)."""
        if pid == self.root and (self.started_ticks is None or st.starttime == self.started_ticks):
            return "root"
        if child_of_member(st):
            return "parent"
        if self.session is not None and st.sid == self.session:
            return "session"
        if self.marker and _uid(pid) in self.uids and procfs.environ_has(pid, self.marker):
            return "marker"
        if self.reparented and st.ppid == os.getpid() and st.sid == pid and self._orphan_of_ours(pid, st):
            return "reparented"  # see signal_orphans: in a kernel it is watched, not signalled
        return None

    def _orphan_of_ours(self, pid: int, st: "procfs.Stat") -> bool:
        # A child of memscope it did not fork itself: an orphan the kernel handed over because memscope is the
        # subreaper. It left the run's session (setsid) so nothing else ties it to the run; with two runs in one
        # process it cannot be told whose it is, so it is claimed only when a single run is supervised.
        with _lock:
            if pid in _launched or _subreaper_users != 1:
                return False
        return self.started_ticks is None or st.starttime >= self.started_ticks

    def descends(self, pid: int, st: "procfs.Stat | None" = None) -> bool:
        """Whether the ppid chain of ``pid`` reaches the root (or the run's session). Each link is proven as
        ``TreeSampler.child_of_member`` proves it: the parent, read after its child, started no later than the child."""
        st = st or procfs.read_stat(pid)
        for _ in range(_ANCESTRY_DEPTH):
            if st is None:
                return False
            if st.pid == self.root and (self.started_ticks is None or st.starttime == self.started_ticks):
                return True
            if self.session is not None and st.sid == self.session:
                return True
            if st.ppid <= 1:
                return False
            parent = procfs.read_stat(st.ppid)
            if parent is None or parent.starttime > st.starttime:
                return False  # the pid was reused since: whoever holds it now is not this child's parent
            st = parent
        return False


def _uid(pid: int) -> int | None:
    """The user a process runs as (the owner of /proc/PID), None if unreadable."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


# -- signals ---------------------------------------------------------------------------------------------------
def same_process(pid: int, start: int) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (clock ticks since boot)."""
    st = procfs.read_stat(pid)
    return st is not None and st.starttime == start and st.state not in ("Z", "X")


def exited(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie not yet reaped, or gone)."""
    st = procfs.read_stat(pid)
    return st is None or st.state in ("Z", "X")


def send(pid: int, start: int | None, sig: int, skip_group: int | None = None, require_handler: bool = False) -> bool:
    """Signal ``pid`` if it is still the process that started at ``start`` (clock ticks since boot).

    The pidfd is opened first and the start time checked after: if they agree, the pidfd names the process that
    was recorded, and a pid reused in between can never receive the signal. ``start`` None: the root, which
    cannot be reused before memscope reaps it. ``skip_group``: a process group just signalled as a whole; a
    member still in it is not signalled twice (a second SIGTERM can land while its handler is being undone).
    ``require_handler``: send only if the process catches ``sig`` now (SigCgt, read after the pidfd is open: a
    signal whose default action kills, as a real-time signal's does, never reaches a process without a handler)."""
    if pid <= 1 or pid == os.getpid():
        return False
    fd = None
    if LINUX and hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:
            fd = None  # no pidfd here (old kernel, out of descriptors): check then kill, the narrower race
    try:
        if start is not None and not same_process(pid, start):
            return False
        if require_handler and (start is None or not procfs.catches(pid, sig)):
            return False
        if skip_group is not None:
            st = procfs.read_stat(pid)
            if st is not None and st.pgid == skip_group:
                return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        elif require_handler:
            return False  # without a pidfd the check and the kill could name two processes: not for this signal
        else:
            os.kill(pid, sig)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "tcsh", "csh", "fish"}  # a batch script's interpreter


def slurm_launcher() -> bool:
    """Whether memscope was started by Slurm: as a step's task (its parent is ``slurmstepd``), or by a batch script
    (a shell whose parent is) without a terminal. Read once at start: at a time limit Slurm signals the script's
    shell too, which dies of it at once and re-parents memscope before memscope's own handler runs."""
    if not LINUX or not os.environ.get("SLURM_JOB_ID"):
        return False
    try:
        parent = procfs.read_stat(os.getppid())
        grand = procfs.read_stat(parent.ppid) if parent is not None and parent.ppid > 1 else None
    except OSError:
        return False
    stepd = parent is not None and parent.comm == "slurmstepd"
    script = parent is not None and parent.comm in _SHELLS and grand is not None and grand.comm == "slurmstepd"
    return stepd or (script and not os.isatty(0))


def scheduler_signals_run(root: int, slurm: bool) -> str | None:
    """The scheduler that signals every process of the run itself, or None: "Slurm" when memscope was started by
    Slurm (``slurm``: `slurm_launcher()` at start) and the run's root is in memscope's own cgroup, the step's:
    Slurm's time limit and ``scancel`` signal every process of it (proctrack/cgroup), so the training has its own
    copy. Under anything else between (``timeout``, an interactive shell whose Ctrl-C reaches memscope's group
    alone) the signal is memscope's only: None."""
    if not slurm:
        return None
    try:
        with open("/proc/self/cgroup") as mine, open(f"/proc/{root}/cgroup") as its:
            return "Slurm" if mine.read() == its.read() else None
    except OSError:
        return None


# -- reaping ---------------------------------------------------------------------------------------------------
def reap(pid: int) -> int | None:
    """The wait status of ``pid`` if it is our child and has ended (collected now), else None."""
    try:
        got, status, _ = os.wait4(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        return None
    return status if got == pid else None


def wait_root(pid: int) -> tuple[int | None, int | None]:
    """Block until the root ends: (Popen-style returncode, peak RSS in bytes), or (None, None) if not ours."""
    while True:
        try:
            _, status, ru = os.wait4(pid, 0)
            break
        except ChildProcessError:
            return None, None
        except InterruptedError:
            continue
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    # ru_maxrss: kilobytes on Linux, bytes on macOS.
    return rc, int(ru.ru_maxrss) * (1 if sys.platform == "darwin" else 1024)


def own_peak_rss() -> int | None:
    """This process's peak RSS in bytes (getrusage), None where unknown.

    A child's ru_maxrss starts from its launcher's: the kernel carries the peak of the memory it replaced at exec
    (and a fork copies the parent's), so a run launched by a notebook kernel of 3 GiB reports at least 3 GiB.
    Taken just after the launch, this is the floor below which the child's figure says nothing of its own."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * (1 if sys.platform == "darwin" else 1024)
    except (ImportError, OSError, ValueError):
        return None


# One decoding of wait statuses and signal numbers, the tree sampler's (a zombie's status reads the same way).


class Supervisor:
    """Signals for one run: the group while the root is unreaped, then each member checked by start time. An
    attached run (memscope did not start it) is never signalled: watching is all memscope does there."""

    def __init__(
        self,
        root: int,
        attached: bool,
        members: Callable[[], dict[int, int]],
        root_reaped: Callable[[], bool],
        on_sent: Callable[[int, list[int], str], None] | None = None,
    ) -> None:
        self.root = root
        self.attached = attached
        self._members = members  # pid -> start time of the run's live processes
        self._root_reaped = root_reaped
        self.signalled: dict[int, list[str]] = {}  # pid -> signals sent, for the record
        # (signal, pids, to: "group" | "process" | "tree" | "leftovers"): what was really sent, for the verdict's
        # words (SIGINT alone often ends a run).
        self._on_sent = on_sent or (lambda sig, pids, to: None)

    def _note(self, pid: int, sig: int) -> None:
        self.signalled.setdefault(pid, []).append(signal_name(sig))

    def signal_group(self, sig: int) -> None:
        """What a terminal does (Ctrl-C, hangup): the run's foreground group, as one."""
        if self.root <= 1 or self.attached:
            return  # not started (killpg(0) would signal memscope's own group), or not ours to signal
        if not self.attached and not self._root_reaped():
            try:
                os.killpg(self.root, sig)
                self._note(self.root, sig)
                self._on_sent(sig, [self.root], "group")
                return
            except OSError:
                pass
        start = self._members().get(self.root)
        if start is not None and send(self.root, start, sig):  # reaped or not ours: only the recorded process
            self._note(self.root, sig)
            self._on_sent(sig, [self.root], "process")

    def signal_if_caught(self, pid: int, sig: int) -> bool:
        """``sig`` to one process of the run, only where it catches ``sig`` now (a user signal passed on, never
        one whose default action would end a process that did not ask for it)."""
        if self.root <= 1 or self.attached:
            return False
        start = self._members().get(pid)
        if start is None or not send(pid, start, sig, require_handler=True):
            return False
        self._note(pid, sig)
        self._on_sent(sig, [pid], "process")
        return True

    def signal_run(self, sig: int) -> list[int]:
        """Every live process of the run (the group, then each member that left it), checked one by one."""
        if self.root <= 1 or self.attached:
            return []
        group = None
        if not self.attached and not self._root_reaped():
            try:
                os.killpg(self.root, sig)
                group = self.root
                self._note(self.root, sig)
            except OSError:
                pass
        sent = []
        for pid, start in self._members().items():
            if pid == self.root and group is not None:
                continue
            if send(pid, start, sig, skip_group=group):
                self._note(pid, sig)
                sent.append(pid)
        if group is not None or sent:
            self._on_sent(sig, ([group] if group is not None else []) + sent, "tree")
        return sent

    def clean_leftovers(
        self, left: dict[int, int], stop_requested: str | None, announce: Callable[[list[int]], None]
    ) -> dict[int, int]:
        """After the root: what of the run is still alive (pid -> start time) gets a moment to end, then SIGTERM,
        then SIGKILL (``announce(pids)`` first). Returns pid -> wait status of those memscope could reap (orphans
        re-parented to it are its children now; only these pids are waited for)."""
        ours = list(left)
        if self.attached:
            return {}
        if left:
            left = wait_gone(left, 0.0 if stop_requested == "kill" else 2.0)
        if left:
            announce(sorted(left))
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if sig == signal.SIGKILL:
                    left = wait_gone(left, 0.0 if stop_requested else 2.0)
                sent = [p for p, st in left.items() if send(p, st, sig)]
                for p in sent:
                    self._note(p, sig)
                if sent:
                    self._on_sent(sig, sent, "leftovers")
            wait_gone(left, 2.0)
        reaped = {}
        for pid in ours:
            status = reap(pid)
            if status is not None:
                reaped[pid] = status
        return reaped

    def stop_sequence(self, grace: float, gone: Callable[[float], bool], first: int = signal.SIGINT) -> None:
        """``first`` to the group (SIGINT: Ctrl-C; SIGTERM: what a scheduler sends), SIGTERM to every member after
        ``grace``, SIGKILL after another ``grace``. ``gone(timeout)``: whether the root ended within it."""
        if first == signal.SIGINT:
            self.signal_group(first)
            if gone(grace):
                return
        self.signal_run(signal.SIGTERM)
        if gone(grace):
            return
        self.signal_run(signal.SIGKILL)


def wait_gone(pids: Mapping[int, int], timeout: float) -> dict[int, int]:
    """Wait until none of ``pids`` (pid -> start time) is alive (zombies count as gone); returns the survivors."""
    deadline = time.monotonic() + timeout
    left = dict(pids)
    while left:
        left = {p: s for p, s in left.items() if _still(p, s)}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return left


def _still(pid: int, start: int) -> bool:
    try:
        return same_process(pid, start)
    except OSError:
        return True  # unreadable (out of descriptors): not proven gone
