"""Why the run ended: a pure function of the evidence gathered around it.

SIGKILL leaves nothing inside the process, so the evidence for an OOM kill is outside: the kernel's log naming
a process of the run as the OOM killer's victim (/dev/kmsg, where memscope may read it); else the run's cgroup's
OOM counter (memory.events / memory.oom_control) rising while the run held much of the limit: the counter counts
the kills of *every* process in the cgroup, and a container's sidecar killed there says nothing about the run;
else, where the run has no readable cgroup counter, the host's /proc/vmstat counter rising while the run was near
a limit. The host counter alone proves nothing on a shared host (someone else's process was the victim).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..fmt import signal_name
from ..model import ExitInfo
from .gpu import cuda_oom_message, is_cuda_oom

FATAL = {"SIGSEGV": "segfault", "SIGABRT": "abort", "SIGBUS": "bus_error", "SIGFPE": "segfault", "SIGILL": "segfault"}
_FAULT_TEXT = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating-point exception": "SIGFPE",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
    "Killed": "SIGKILL",
    "Terminated": "SIGTERM",
}
# torch/utils/data/_utils/signal_handling.py and dataloader.py word it like this.
_DL_WORKER = re.compile(
    r"DataLoader worker \(pid\(?s?\)? ([\d, ]+)\)\s*(?:is killed by signal: ([A-Za-z -]+)|"
    r"exited unexpectedly)"
)
NEAR_LIMIT = 0.95
# Without the kernel's log, a cgroup's OOM kill is the run's only if the run held at least this share of the limit
# at its last sample: the OOM killer takes the largest process, and one that holds half the cgroup is that.
# Samples lag an allocation's last burst, so "near" (95 %) would miss a run that died mid-burst.
RUN_SHARE_OF_LIMIT = 0.5
# They pause or resume, or they are a user signal passed on to a training that catches it: they end nothing.
ENDS_NOTHING = {"SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGUSR1", "SIGUSR2"}


@dataclass
class ExitEvidence:
    """Everything the exit cause is decided from, gathered from the record (analysis/summary.evidence)."""

    root_pid: int
    returncode: int | None  # Popen style: -N = killed by signal N; None = not observed
    main_pid: int | None = None
    stop_requested: str | None = None  # "stop" | "kill"
    signals_sent: list[dict[str, Any]] = field(default_factory=list)  # "signal_sent" events' data, in order
    exceptions: dict[int, dict[str, Any]] = field(default_factory=dict)  # pid -> type, message, traceback
    faults: dict[int, str] = field(default_factory=dict)  # pid -> faulthandler text
    roles: dict[int, str] = field(default_factory=dict)
    proc_signals: dict[int, str] = field(default_factory=dict)  # pid -> signal seen from outside
    host_oom_delta: int | None = None
    cgroup_oom_delta: int | None = None
    last_tree_bytes: int | None = None
    limit_bytes: int | None = None
    maxrss_bytes: int | None = None
    scalene: bool = False  # the root is Scalene's launcher (memscope run --scalene)
    cuda_ooms: dict[int, dict[str, Any]] = field(default_factory=dict)  # pid -> the allocator's OOM observer
    agent_pids: set[int] | None = None  # processes whose agent said hello; None: not known (an old record)
    ranks: dict[int, str] = field(default_factory=dict)  # pid -> its RANK (torchrun), from its agent
    host_available_bytes: int | None = None  # at the last host sample
    host_total_bytes: int | None = None
    execs: dict[int, dict[str, Any]] = field(default_factory=dict)  # pid -> the os.exec* its agent announced
    # last, with no hello since: the image that ended has no agent
    oom_victims: dict[int, str] | None = None  # pid -> name the kernel's log says the OOM killer took; None: unread
    names: dict[int, str] = field(default_factory=dict)  # pid -> name of every process of the run


def fault_signal(text: str | None) -> str | None:
    """The signal named by a faulthandler dump ("Fatal Python error: Segmentation fault")."""
    if not text:
        return None
    m = re.search(r"Fatal Python error: ([A-Za-z -]+)", text)
    if m:
        return _FAULT_TEXT.get(m.group(1).strip())
    return None


def _gib(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def crashing_thread_first(text: str | None) -> str | None:
    """A faulthandler dump with the crashing thread's block ("Current thread ...") moved up to just after the
    "Fatal Python error" line: faulthandler lists the other threads (the agent's, a DataLoader's pin thread, a
    logger's) in their own order, and a reader saw three unrelated stacks before the one that crashed."""
    if not text or "Fatal Python error" not in text:
        return text
    blocks = text.split("\n\n")
    cur = next((i for i, b in enumerate(blocks) if b.lstrip().startswith("Current thread")), None)
    first = next((i for i, b in enumerate(blocks) if b.lstrip().startswith(("Thread 0x", "Current thread"))), None)
    if cur is None or first is None or cur == first:
        return text
    return "\n\n".join(blocks[:first] + [blocks[cur]] + blocks[first:cur] + blocks[cur + 1 :])


def _is_library(path: str) -> bool:
    return any(m in path for m in ("/site-packages/", "/dist-packages/", "/lib/python", "<frozen "))


def _last_frame(text: str | None) -> str | None:
    """'train.py, line 12 in step': the innermost frame of the user's own code in a traceback or a faulthandler
    dump (of the current thread), skipping library frames (ctypes, torch) when there is a user frame."""
    if not text:
        return None
    if "Fatal Python error" in text:
        # faulthandler: the current thread's block comes first, innermost frame first.
        block = text.split("\n\n")
        # "Current thread" is the one that crashed; other threads (the agent's, Scalene's) may be listed first.
        cur = next((b for b in block if b.lstrip().startswith("Current thread")), None) or next(
            (b for b in block if "most recent call first" in b), text
        )
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', cur)
    else:
        frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)[::-1]
    if not frames:
        return None
    f = next((fr for fr in frames if not _is_library(fr[0])), frames[0])
    return f"{f[0].rsplit('/', 1)[-1]}, line {f[1]} in {f[2]}"


def near_limit(e: ExitEvidence) -> list[str]:
    """What says the run was close to running out: its tree near its limit, or the host nearly out of memory."""
    out = []
    if e.limit_bytes and e.last_tree_bytes is not None and e.last_tree_bytes >= NEAR_LIMIT * e.limit_bytes:
        out.append(f"the tree used {_gib(e.last_tree_bytes)} of its {_gib(e.limit_bytes)} limit at the last sample")
    if (
        e.host_total_bytes
        and e.host_available_bytes is not None
        and e.host_available_bytes <= (1 - NEAR_LIMIT) * e.host_total_bytes
    ):
        out.append(f"the host had {_gib(e.host_available_bytes)} of {_gib(e.host_total_bytes)} available")
    return out


def oom_victims_of_run(e: ExitEvidence) -> list[tuple[int, str]]:
    """The processes of the run the kernel's log names as the OOM killer's victims (pid and name both match)."""
    return [
        (pid, name)
        for pid, name in (e.oom_victims or {}).items()
        if pid in e.names and (not name or not e.names[pid] or e.names[pid][:15] == name[:15])
    ]


def run_share(e: ExitEvidence) -> str | None:
    """'the tree used X of its Y limit at the last sample' when the run held enough of the limit to be the OOM
    killer's choice (``RUN_SHARE_OF_LIMIT``), or its peak RSS came near the limit; else None."""
    if not e.limit_bytes:
        return None
    if e.last_tree_bytes is not None and e.last_tree_bytes >= RUN_SHARE_OF_LIMIT * e.limit_bytes:
        return f"the tree used {_gib(e.last_tree_bytes)} of its {_gib(e.limit_bytes)} limit at the last sample"
    if e.maxrss_bytes and e.maxrss_bytes >= NEAR_LIMIT * e.limit_bytes:
        return f"its peak RSS was {_gib(e.maxrss_bytes)} of its {_gib(e.limit_bytes)} limit"
    return None


def oom_evidence(e: ExitEvidence) -> list[str]:
    """Why a SIGKILL was the OOM killer's, or [] when the evidence does not say so.

    The kernel's log naming a process of the run decides. Else the run's own cgroup counter, where it can be
    read, must have risen while the run held much of the limit (``run_share``) or was near a limit: the
    counter also counts a sidecar killed in the same container. Without it, the host counter must have risen and the run must have
    been near a limit; with no counter readable at all, being near the limit is all there is to go on."""
    rose = [f"the container's oom_kill counter rose by {e.cgroup_oom_delta}"] if e.cgroup_oom_delta else []
    named = oom_victims_of_run(e)
    if named:
        pid, name = named[-1]
        return [f"the kernel's log says the OOM killer killed {name or 'pid'} (pid {pid}), a process of the run", *rose]
    if e.cgroup_oom_delta:
        held = [share] if (share := run_share(e)) else near_limit(e)
        return [*rose, *held] if held else []
    if e.cgroup_oom_delta is not None:
        return []  # its own counter was read and did not move: the OOM killer did not take this run
    near = near_limit(e)
    if e.host_oom_delta and near:
        return [f"the host's oom_kill counter rose by {e.host_oom_delta}", *near]
    if e.host_oom_delta is None:
        return near
    return []


def counter_rise(values: list[tuple[float, int | None]], breaks: Sequence[float] = ()) -> int | None:
    """How much a cumulative counter rose over ``values`` ((t, value) in time order); None if it was never read
    twice. A reading after a break (the run moved to another cgroup at that time) starts a new count: the rise
    is summed per stretch, never across two different counters."""
    pts = [(t, v) for t, v in values if v is not None]
    if len(pts) < 2:
        return None
    rise = 0
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if any(t0 < b <= t1 for b in breaks):
            continue
        rise += max(0, v1 - v0)
    return rise


def crashed_workers(e: ExitEvidence) -> list[tuple[int, str]]:
    """(pid, signal) of DataLoader workers or ranks that died of a signal, and of any other process of the run
    (a multiprocessing.Process child, a compile worker, a helper) that crashed (a fatal signal)."""
    out: dict[int, str] = {}
    for pid, role in e.roles.items():
        if role in ("main", "wrapper") or pid == (e.main_pid or e.root_pid):
            continue
        sig = fault_signal(e.faults.get(pid)) or e.proc_signals.get(pid)
        if sig and (sig in FATAL if role not in ("dataloader_worker", "rank") else sig not in ("SIGINT", "SIGTERM")):
            out[pid] = sig
    main_exc = e.exceptions.get(e.main_pid or e.root_pid)
    if main_exc:
        for m in _DL_WORKER.finditer(main_exc.get("message", "") + "\n" + main_exc.get("traceback", "")):
            sig = _FAULT_TEXT.get((m.group(2) or "").strip().rstrip("."))
            for p in m.group(1).replace(",", " ").split():
                known = out.get(int(p))
                if known is None or known == "unknown signal":
                    out[int(p)] = sig or fault_signal(e.faults.get(int(p))) or "unknown signal"
    return sorted(out.items())


@dataclass
class _Facts:
    """What every rule reads, worked out once from the evidence."""

    e: ExitEvidence
    code: int | None  # the exit status, when the root exited (not killed)
    main: int  # the main process (the root when none is known)
    main_sig: str | None  # the signal that ended the main process, however it is known
    fault: str | None  # the main process's faulthandler dump
    exc: dict[str, Any] | None  # the main process's uncaught exception
    failed: bool  # a non-zero status, a death by signal, or an exception recorded in a wrapped main
    hidden: bool = False  # the main failed, but the wrapper (a pipe, tee) exited 0

    def out(
        self, cause: str, message: str, *, sig: str | None = None, pid: int | None = None, tb: str | None = None
    ) -> ExitInfo:
        """The ``exit`` object."""
        return {
            "cause": cause,
            "code": self.code,
            "signal": sig,
            "pid": pid if pid is not None else self.main,
            "message": message,
            "traceback": tb,
        }


def _facts(e: ExitEvidence) -> _Facts:
    rc = e.returncode
    code: int | None = rc if rc is not None and rc >= 0 else None
    root_sig = signal_name(-rc) if rc is not None and rc < 0 else None
    main = e.main_pid or e.root_pid
    fault = e.faults.get(main) or None
    # Through a wrapper (bash script.sh) a child's death by signal N shows as status 128+N.
    wrapped_sig = signal_name(code - 128) if code is not None and 128 < code < 128 + 65 and main != e.root_pid else None
    if e.scalene and code is not None and 256 - 65 < code < 256 and main != e.root_pid:
        wrapped_sig = signal_name(256 - code)  # Scalene's launcher exits with sys.exit(-N) for its child's signal N
    main_sig = (
        (root_sig if main == e.root_pid else None)
        or e.proc_signals.get(main)
        or fault_signal(fault)
        or wrapped_sig
        or root_sig
    )
    exc = e.exceptions.get(main)
    # Behind a wrapper, the status is the wrapper's: `train.py | tee log` exits 0 when train.py raised. What was
    # recorded inside the main says how it ended.
    recorded = main != e.root_pid and (exc is not None or main_sig is not None)
    failed = (rc is not None and rc != 0) or main_sig is not None or recorded
    return _Facts(e, code, main, main_sig, fault, exc, failed, hidden=recorded and rc == 0)


def _hid(f: _Facts) -> str:
    """What to add when the wrapper's status 0 hid the main's failure."""
    if not f.hidden:
        return ""
    return (
        f" The command (pid {f.e.root_pid}) exited 0 all the same: what wraps the program (a pipe such as "
        "`| tee log`, a script that ignores its status) hid the failure."
    )


# -- the rules, one per cause, tried in this order (RULES below); the first that answers decides ---------------------
def _stopped_by_user(f: _Facts) -> ExitInfo | None:
    e = f.e
    if not e.stop_requested:
        return None
    if e.stop_requested == "terminate":
        # What was really sent: SIGKILL only where something outlived the grace period (a record without the
        # signals: the sequence as it would go).
        names = [d.get("signal") for d in e.signals_sent if d.get("signal") not in ENDS_NOTHING]
        kill = (
            "then SIGKILL to what was left after the grace period"
            if "SIGKILL" in names or not e.signals_sent
            else "and the run ended within the grace period (no SIGKILL)"
        )
        return f.out(
            "stopped_by_user",
            f"memscope was asked to stop (SIGTERM) and passed SIGTERM on to the run, {kill}; "
            "no process of the run is left.",
            sig=f.main_sig,
        )
    return f.out("stopped_by_user", f"Stopped by you ({stop_words(e)}); no process of the run is left.", sig=f.main_sig)


def _worker_crash(f: _Facts) -> ExitInfo | None:
    e = f.e
    workers = crashed_workers(e) if f.failed else []
    if not workers:
        return None
    wpid, wsig = workers[0]
    role = e.roles.get(wpid, "dataloader_worker")
    what = {"dataloader_worker": "DataLoader worker", "rank": "rank"}.get(role, "process")
    extra = f" (and {len(workers) - 1} more)" if len(workers) > 1 else ""
    where = _last_frame(e.faults.get(wpid)) if what == "process" else None
    hint = (
        "look for an OOM kill: " + "; ".join(oom_evidence(e))
        if wsig == "SIGKILL" and oom_evidence(e)
        else "run with num_workers=0 to see the failing code in the main process, or use fewer workers"
        if role == "dataloader_worker"
        else "read that rank's stack in exit.traceback"
        if role == "rank"
        else "its Python stack is in exit.traceback"
        if e.faults.get(wpid)
        else "no Python stack was captured"
    )
    tb = crashing_thread_first(e.faults.get(wpid)) or (f.exc or {}).get("traceback")
    return f.out(
        "worker_crash",
        f"{what[0].upper() + what[1:]} pid {wpid} ({role}) died of {wsig}{f' in {where}' if where else ''}{extra} "
        f"and the main process failed after it; {hint}.",
        sig=wsig,
        pid=wpid,
        tb=tb,
    )


def _rank_failed_first(f: _Facts) -> ExitInfo | None:
    first = first_rank_failure(f.e) if f.failed else None
    return _rank_exception(f.e, first, f.out) if first is not None else None


def _fatal_signal(f: _Facts) -> ExitInfo | None:
    e, main, fault = f.e, f.main, f.fault
    if f.main_sig not in FATAL:
        return None
    where = _last_frame(fault)
    at = f" in {where}" if where else ""
    stack = (
        "the Python stack of every thread is in exit.traceback"
        if fault
        else "no Python stack was captured (the process did not load memscope's agent)"
        if e.agent_pids is not None and main not in e.agent_pids
        else "no Python stack was captured"
    )
    return f.out(
        FATAL[f.main_sig],
        f"The main process (pid {main}) died of {f.main_sig}{at}; {stack}; a crash in "
        f"native code (an extension, a library or CUDA) is the usual cause.{_hid(f)}",
        sig=f.main_sig,
        tb=crashing_thread_first(fault),
    )


def _exception(f: _Facts) -> ExitInfo | None:
    exc = f.exc
    if not (exc and f.failed):
        return None
    name = exc.get("type", "Exception")
    msg = (exc.get("message") or "").strip().splitlines()
    first = msg[0][:300] if msg else ""
    where = _last_frame(exc.get("traceback"))
    if is_cuda_oom(name, exc.get("message")):  # older PyTorch raised a RuntimeError
        return f.out(
            "cuda_oom",
            cuda_oom_message(exc.get("message") or "", where, f.e.cuda_ooms.get(f.main)),
            tb=exc.get("traceback"),
        )
    at = f" at {where}" if where else ""
    said = f"{name}: {first}{at}." if first else f"{name} was raised{at}."
    if f.hidden:
        said = f"{said[:-1]} (in pid {f.main}, the main process).{_hid(f)}"
    return f.out("exception", said, tb=exc.get("traceback"))


def _sigkill(f: _Facts) -> ExitInfo | None:
    e = f.e
    if f.main_sig != "SIGKILL":
        return None
    ev = oom_evidence(e)
    peak = f"; the kernel's peak RSS for it was {_gib(e.maxrss_bytes)}" if e.maxrss_bytes else ""
    if ev:
        return f.out(
            "oom_kill",
            f"The run was killed by SIGKILL and it looks like the OOM killer: "
            f"{'; '.join(ev)}{peak}. Lower its memory use or raise the limit.",
            sig="SIGKILL",
        )
    # Which measure: last_tree_bytes is the sum of the tree's RSS at its last sample (read: "1.10 GiB of what?").
    at = (
        f" with the tree's RSS at {_gib(e.last_tree_bytes)} at its last sample" if e.last_tree_bytes is not None else ""
    )
    lim = f" (a {_gib(e.limit_bytes)} limit)" if e.limit_bytes else ""
    if e.cgroup_oom_delta:  # an OOM kill in its cgroup, not proven to be the run's: mention it, blame none
        rose = f"its container's oom_kill counter rose by {e.cgroup_oom_delta}"
        others = [f"{n or 'a process'} (pid {p})" for p, n in (e.oom_victims or {}).items() if p not in e.names]
        if e.oom_victims is not None:
            took = f"took {', '.join(others[-3:])}, " if others else ""
            why = f"{rose}, but the kernel's log says the OOM killer {took}no process of the run"
        else:
            why = f"{rose}, but the run held too little of the limit to be its victim: another process there was"
    elif e.cgroup_oom_delta is not None and e.host_oom_delta:
        why = (
            f"its cgroup's oom_kill counter did not rise (the host's rose by {e.host_oom_delta}: the OOM "
            "killer took another process on this host)"
        )
    elif e.host_oom_delta:
        why = (
            f"the host's oom_kill counter rose by {e.host_oom_delta} but the run was far from any limit, "
            "so another process was the OOM killer's victim"
        )
    else:
        why = "no OOM counter rose"
    return f.out(
        "killed",
        f"The run was killed by SIGKILL from outside{at}{lim}; {why}, so look "
        "for who sent it (a scheduler, a time limit, a person).",
        sig="SIGKILL",
    )


def _other_signal(f: _Facts) -> ExitInfo | None:
    if f.main_sig is None:
        return None
    if f.main_sig == "SIGPIPE":  # the kernel's, not a sender's: a write to a pipe nobody reads any more
        return f.out(
            "killed",
            "The run was ended by SIGPIPE: it wrote to a pipe whose reader had already closed it "
            "(`| head` does that once it has its lines; so does a log reader that exits).",
            sig=f.main_sig,
        )
    return f.out("killed", f"The run was ended by {f.main_sig} from outside memscope.", sig=f.main_sig)


def _exit_status(f: _Facts) -> ExitInfo:
    e, main, exc, rc = f.e, f.main, f.exc, f.e.returncode
    if rc == 0:
        return f.out("ok", "The run finished normally (exit code 0).")
    if rc is None:
        if exc:
            return f.out("exception", f"{exc.get('type')}: {exc.get('message', '')[:300]}", tb=exc.get("traceback"))
        return f.out(
            "unknown", "The watched process ended; its exit status could not be observed (attached, not its parent)."
        )
    if e.agent_pids is not None and main not in e.agent_pids:
        # No agent in the process: an exception may well have ended it; memscope cannot say.
        ex = e.execs.get(main)
        why = (
            f"it re-executed itself after its agent said hello ({' '.join(ex.get('argv') or [])[:120]}), and the "
            "new image loaded no agent — python -I or -S, or a cleared environment"
            if ex is not None
            else "no agent loaded — not Python, started with python -I or -S, or a PYTHONPATH that dropped memscope's"
        )
        return f.out(
            "exit_nonzero",
            f"The command exited with status {rc}; memscope could not see inside this "
            f"process (pid {main}: {why}), so whether an exception ended it is unknown; read its "
            "last output lines for the reason.",
        )
    return f.out(
        "exit_nonzero",
        f"The command exited with status {rc} without an uncaught Python exception; "
        "read its last output lines for the reason.",
    )


# In priority order: a stop the user asked for explains everything after it; a crashed worker or rank explains
# the main process's failure that follows it; then how the main process itself ended. The last always answers.
RULES: tuple[Callable[[_Facts], ExitInfo | None], ...] = (
    _stopped_by_user,
    _worker_crash,
    _rank_failed_first,
    _fatal_signal,
    _exception,
    _sigkill,
    _other_signal,
    _exit_status,
)


def decide(e: ExitEvidence) -> ExitInfo:
    """The summary's ``exit`` object: cause, code, signal, pid, message, traceback (the first rule that answers)."""
    f = _facts(e)
    for rule in RULES:
        verdict = rule(f)
        if verdict is not None:
            return _with_crashed_children(e, verdict)
    raise AssertionError("the last rule always answers")


def _with_crashed_children(e: ExitEvidence, verdict: ExitInfo) -> ExitInfo:
    """A process of the run that crashed (a multiprocessing.Process child's segfault) is named in the verdict
    even when the main went on and ended by itself: nothing else would say it."""
    if verdict["cause"] in ("stopped_by_user", "worker_crash"):
        return verdict
    crashed = [(p, sig) for p, sig in crashed_workers(e) if sig in FATAL and p != verdict["pid"]]
    if not crashed:
        return verdict
    pid, sig = crashed[0]
    where = _last_frame(e.faults.get(pid))
    more = f" (and {len(crashed) - 1} more)" if len(crashed) > 1 else ""
    stack = (
        f"its Python stack is in exit.traceback{'' if verdict['traceback'] is None else ' after the main one'}"
        if e.faults.get(pid)
        else "no Python stack was captured"
    )
    tb = verdict["traceback"]
    if e.faults.get(pid):
        tb = f"{tb}\n\n{e.faults[pid]}" if tb else e.faults[pid]
    return {
        **verdict,
        "message": f"{verdict['message']} Process pid {pid} ({e.roles.get(pid) or 'other'}) of the run died of {sig}"
        f"{f' in {where}' if where else ''}{more} while it ran; {stack}.",
        "traceback": tb,
    }


def first_rank_failure(e: ExitEvidence) -> int | None:
    """torchrun: the rank whose exception came first in time, when ranks raised (the others' errors, a gloo
    "connection closed" on rank 0, follow from it). None when no rank raised."""
    ranks = [pid for pid, role in e.roles.items() if role == "rank"]
    if any(e.faults.get(p) or e.proc_signals.get(p) in FATAL for p in ranks):
        return None  # a rank crashed in native code: that story is told by the crash paths
    raised = [(float(x.get("wall") or "inf"), pid) for pid, x in e.exceptions.items() if pid in ranks]
    return min(raised)[1] if raised else None


def _rank_name(e: ExitEvidence, pid: int) -> str:
    rank = (e.exceptions.get(pid) or {}).get("rank") or e.ranks.get(pid)
    return f"Rank {rank} (pid {pid})" if rank is not None else f"The rank with pid {pid}"


def _rank_exception(e: ExitEvidence, pid: int, out: Callable[..., ExitInfo]) -> ExitInfo:
    exc = e.exceptions[pid]
    name = exc.get("type", "Exception")
    msg = (exc.get("message") or "").strip().splitlines()
    first = f": {msg[0][:300]}" if msg else ""
    where = _last_frame(exc.get("traceback"))
    at = f" at {where}" if where else ""
    others = sorted(p for p in e.exceptions if p != pid and e.roles.get(p) == "rank")
    after = ""
    if others:
        names = ", ".join(_rank_name(e, p).split(" (")[0].lower() for p in others)
        after = f"; {names} failed after it ({e.exceptions[others[0]].get('type', 'Exception')}), a consequence"
    return out(
        "exception", f"{_rank_name(e, pid)} failed first: {name}{first}{at}{after}.", pid=pid, tb=exc.get("traceback")
    )


def stop_words(e: ExitEvidence) -> str:
    """How a stop went, from the signals memscope really sent (a record without them: what a stop sends)."""
    # SIGCONT (timeout sends one after its SIGTERM; records made before 32.1 show it passed on), SIGSTOP, SIGTSTP: job control,
    # not a step of the stop.
    sent = [d for d in e.signals_sent if d.get("to") != "leftovers" and d.get("signal") not in ENDS_NOTHING]
    left = [d for d in e.signals_sent if d.get("to") == "leftovers"]
    if not sent:
        return (
            "SIGINT, then SIGTERM and SIGKILL to what was left after the grace period"
            if e.stop_requested == "stop"
            else "SIGKILL to every process of the tree"
        )
    names = [d.get("signal", "?") for d in sent]
    if names == ["SIGINT"]:
        how = "SIGINT, as Ctrl-C" + ("" if left else "; it ended there")
    elif names == ["SIGKILL"]:
        how = "SIGKILL to every process of the tree"
    else:
        how = ", then ".join(names) + (" (each after the grace period)" if e.stop_requested == "stop" else "")
    if left:
        n = max(len(d.get("pids") or []) for d in left)
        how += f"; then {', '.join(d.get('signal', '?') for d in left)} to {n} process{'es' * (n != 1)} left behind"
    return how
