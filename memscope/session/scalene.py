"""Scalene snapshots: run the script under Scalene with profiling off, profile N seconds on demand.

Launch: ``python -m scalene run --off --cpu-only|--memory -o <record>-scalene/profile.json script.py --- args``,
never Scalene's default CPU+memory+GPU mode (7x to 200x slower on a small torch loop, and it can hang with
DataLoader workers). Scalene is never imported here (importing it sets ``LC_ALL=POSIX`` in the caller): it runs
in subprocesses only.

Toggle: Scalene's ``python -m scalene.profile --on|--off --pid P`` does nothing but ``os.kill(P, SIGILL|SIGBUS)``;
memscope sends those same signals itself, right after checking in ``/proc/P/status`` that P still catches them.
The CLI takes 2.3 s to import Scalene before it sends, and a signal that lands in that gap on a process not (or no
longer) catching it kills the run: measured, an "on" sent before Scalene had finished starting killed the script
with SIGILL, and an "off" that arrived as the script was ending killed it with SIGBUS. The signal numbers and
the profiled pid come from Scalene itself, through the agent (``agent/scalene_probe.py``), once it is ready.

Reading: each "off" makes Scalene rewrite its JSON with everything since the start (cumulative), as percentages
of its total CPU sample time. The agent reports that total with each write, so each line's seconds are exact and
a snapshot is the difference from the previous one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from .. import supervise
from ..collect.platform import procfs
from ..errors import SCALENE_HOW_TO as HOW_TO
from ..errors import LaunchError, ScaleneError
from ..model import Event
from .state import RunState

MODES = {"cpu": "--cpu-only", "memory": "--memory"}


def available() -> bool:
    """Scalene is installed for this interpreter (found without importing it)."""
    return importlib.util.find_spec("scalene") is not None


def mode_of(value: Any) -> str | None:
    """Options.scalene as given by the user: None/False (off), True or "cpu", "memory"."""
    if value is None or value is False:
        return None
    if value is True:
        return "cpu"
    if value in MODES:
        return str(value)
    raise ValueError(f"scalene must be 'cpu' or 'memory', not {value!r}")


def wrap_command(command: list[str], script: str | None, mode: str, outfile: str) -> list[str]:
    """``python script.py args`` -> the same under Scalene, profiling off. Other commands cannot be wrapped."""
    if not script or len(command) < 2 or os.path.abspath(command[1]) != script:
        raise ValueError("--scalene needs a Python script: script.py [args] or python script.py [args]")
    args = command[2:]
    return [
        command[0],
        "-m",
        "scalene",
        "run",
        "--off",
        MODES[mode],
        "-o",
        outfile,
        command[1],
        *(["---", *args] if args else []),
    ]


# -- a run's snapshots -----------------------------------------------------------------------------------------


@dataclass
class ScaleneSnapshot:
    """One Scalene window: when, how long, the hottest lines, and where Scalene's own report is."""

    index: int
    pid: int
    mode: str
    seconds: float  # asked for
    window_s: float  # profiled wall time, as Scalene measured it
    cpu_s: float  # CPU time Scalene sampled in the window
    top: list[dict[str, Any]] = field(default_factory=list)
    json_path: str = ""  # Scalene's cumulative JSON as of this snapshot
    html_path: str = ""  # Scalene's full report from it (written a few seconds after the snapshot)
    note: str = ""
    started_at: float = 0.0  # epoch seconds
    t_s: float | None = None  # on the run's clock (seconds since it started)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as the recorded event's data."""
        return asdict(self)


class ScaleneSession:
    """Scalene's side of one run: where its JSON goes, its profiled pid, and the snapshots taken so far."""

    def __init__(self, mode: str, out_dir: str, python: str = sys.executable) -> None:
        self.mode = mode
        self.dir = out_dir
        self.outfile = os.path.join(out_dir, "profile.json")
        self.python = python
        self.pid: int | None = None
        self._start: int | None = None  # its start time: a signal goes to that process only, never a pid reuser
        self._signals: tuple[int, int] | None = None
        self._ready = threading.Event()
        self._cond = threading.Condition()
        self._writes: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._previous: tuple[dict[str, Any], float | None] | None = None
        self.snapshots: list[ScaleneSnapshot] = []

    def on_agent_message(self, pid: int, msg: dict[str, Any]) -> None:
        """``{"t": "scalene", "state": "ready"|"written", ...}`` from the profiled process's agent."""
        state = msg.get("state")
        if state == "ready" and msg.get("on") and msg.get("off"):
            st = procfs.read_stat(pid)  # it is alive: it just sent this
            if st is None:
                return
            self.pid, self._start, self._signals = pid, st.starttime, (int(msg["on"]), int(msg["off"]))
            self._ready.set()
        elif state == "written" and pid == self.pid:  # not a forked child's write at its exit
            with self._cond:
                self._writes.append(dict(msg, pid=pid))
                self._cond.notify_all()

    def snapshot(self, seconds: float, ended: Callable[[], bool], wait_ready_s: float = 30.0) -> ScaleneSnapshot:
        """Profile ``seconds`` of the running script; raises ScaleneError (one line) when it cannot."""
        if seconds <= 0:
            raise ScaleneError("seconds must be positive")
        if not self._lock.acquire(blocking=False):
            raise ScaleneError("a Scalene snapshot is already being taken")
        try:
            return self._snapshot(seconds, ended, wait_ready_s)
        finally:
            self._lock.release()

    def _snapshot(self, seconds: float, ended: Callable[[], bool], wait_ready_s: float) -> ScaleneSnapshot:
        deadline = time.monotonic() + wait_ready_s
        while not self._ready.wait(0.1):
            if ended() or time.monotonic() > deadline:
                raise ScaleneError(
                    "Scalene has not started the script (no word from memscope's agent in it)"
                    if not ended()
                    else "the run has ended"
                )
        pid, (on, off) = self.pid, self._signals  # type: ignore[misc]
        assert pid is not None
        with self._cond:
            writes_before = len(self._writes)
        if not procfs.catches(pid, on, off):
            raise ScaleneError(f"the profiled process (pid {pid}) is not taking Scalene's signals: it is ending")
        started = time.time()
        if not supervise.send(pid, self._start, on):
            raise ScaleneError(f"the profiled process (pid {pid}) is gone")
        note = ""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(0.1, max(end - time.monotonic(), 0.0)))
            if not procfs.catches(pid, on, off):
                break
        if not (procfs.catches(pid, on, off) and supervise.send(pid, self._start, off)):
            note = "the script ended during the window"  # Scalene writes its profile on the way out
        deadline = time.monotonic() + 60.0
        with self._cond:
            while len(self._writes) <= writes_before:
                if ended():  # a script that crashed in the window leaves no profile
                    raise ScaleneError(f"the run ended before Scalene wrote its profile (pid {pid})")
                if time.monotonic() > deadline:
                    raise ScaleneError(f"Scalene did not write its profile within 60 s (pid {pid})")
                self._cond.wait(0.2)
            write = self._writes[-1]
        profile = _read_json(self.outfile)
        cur = (profile, write.get("total_cpu_s"))
        from ..analysis.scalene import diff_profiles  # loaded while the run goes (finish.load_analyses)

        rows, window_s, cpu_s = diff_profiles(self._previous, cur, memory=self.mode == "memory")
        self._previous = cur
        index = len(self.snapshots) + 1
        snap_dir = os.path.join(self.dir, f"snapshot-{index}")
        os.makedirs(snap_dir, exist_ok=True)
        json_path = os.path.join(snap_dir, "profile.json")
        shutil.copyfile(self.outfile, json_path)
        if write.get("total_cpu_s") is None:
            note = "; ".join(x for x in (note, "CPU shares approximate (Scalene's total was not reported)") if x)
        snap = ScaleneSnapshot(
            index,
            pid,
            self.mode,
            float(seconds),
            window_s,
            cpu_s,
            rows,
            json_path,
            start_html(json_path, self.python),
            note,
            started,
        )
        self.snapshots.append(snap)
        return snap


def _read_json(path: str, timeout: float = 10.0) -> dict[str, Any]:
    """Scalene writes its JSON in place (not atomically): retry until it parses."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path) as f:
                profile: dict[str, Any] = json.load(f)
                return profile
        except (OSError, ValueError) as exc:
            if time.monotonic() > deadline:
                raise ScaleneError(f"cannot read Scalene's profile {path}: {exc}") from None
            time.sleep(0.1)


# Scalene writes its report in place, in the folder it runs in: render it in a folder of its own, then rename it
# beside the JSON, so that a report that exists is whole (a reader opening it mid-write saw an empty file).
_RENDER = """
import os, shutil, subprocess, sys
json_path, work, final = sys.argv[1:4]
subprocess.run([sys.executable, "-m", "scalene", "view", "--standalone", json_path], cwd=work,
               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    os.replace(os.path.join(work, "scalene-profile.html"), final)
finally:
    shutil.rmtree(work, ignore_errors=True)
"""


def start_html(json_path: str, python: str = sys.executable) -> str:
    """Start Scalene's own standalone HTML report of ``json_path`` (``scalene view --standalone``, 5-10 s) in a
    detached process, so that it is written even if the caller exits; returns where it will be once whole."""
    json_path = os.path.abspath(json_path)
    folder = os.path.dirname(json_path)
    final = os.path.join(folder, "scalene-profile.html")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSCOPE_")}
    try:
        work = tempfile.mkdtemp(prefix=".html-", dir=folder)
    except OSError:
        return final
    try:
        subprocess.Popen(
            [python, "-c", _RENDER, json_path, work, final],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
    return final


# -- a Run's Scalene side ------------------------------------------------------------------------------------------
def prepare(run: RunState) -> ScaleneSession | None:
    """At a run's creation: wrap its command in Scalene when its options ask for it (LaunchError if they cannot)."""
    try:
        mode = mode_of(run.options.scalene)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    if mode is None:
        return None
    if run.attached:
        raise LaunchError("--scalene starts the script under Scalene; it cannot attach to a running process")
    if run.command[0] == sys.executable and not available():
        raise LaunchError("--scalene: Scalene is not installed here (pip install 'memscope[scalene]')")
    session = ScaleneSession(mode, os.path.join(run.record_dir, f"{run.run_id}-scalene"), run.command[0])
    try:
        run.command = wrap_command(run.command, run.script, mode, session.outfile)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    os.makedirs(session.dir, exist_ok=True)
    return session


def take_snapshot(run: RunState, session: ScaleneSession | None, seconds: float) -> ScaleneSnapshot:
    """``Run.scalene_snapshot``: profile ``seconds`` of the running script, recorded as a "scalene_snapshot" event."""
    if session is None:
        raise ScaleneError(f"this run is not under Scalene; {HOW_TO}")
    if run.is_ended:
        raise ScaleneError("the run has ended")
    if not run.options.agent:
        raise ScaleneError("snapshots need memscope's agent in the profiled process (not --no-agent)")
    t = run.elapsed()
    snap = session.snapshot(seconds, lambda: run.is_ended)
    snap.t_s = round(t, 3)
    run.publish(Event(t, snap.pid, "scalene_snapshot", snap.to_dict()))
    return snap
