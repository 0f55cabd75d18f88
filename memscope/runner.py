"""Run: launch a command in its own session under memscope, watch its tree, stop it, and say why it ended.

Usable from plain Python (``memscope.run([...])``), the CLI and the notebook alike. Threads, none of which
waits on another: the waiter (os.wait4 on the root), the RSS sampler (with discovery and host reads), the PSS
sampler, the agent server, the recorder, and one dispatcher per subscriber.
"""
from __future__ import annotations

import collections
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import supervise
from .agent import protocol
from .analysis.summary import summarize
from .collect import host as host_mod
from .collect.procfs import Unreadable
from .collect.tree import TreeSampler, signal_name
from .model import Event, HostSample, ProcessExited, ProcessSeen, Record, RunEnded, TreeSample
from .store import Recorder, RunData, default_record_dir
from .store import stderr_line as _say

if TYPE_CHECKING:
    from .analysis.census import Census
    from .scalene import ScaleneSession, ScaleneSnapshot

AGENT_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent", "site")
PSS_CPU_BUDGET = 0.015  # the PSS thread's share of one core at most (benchmarks/collector_cpu.py measures it)
SNAPSHOT_EXITED = 200   # exited processes the live snapshot keeps (the record keeps them all)
SUMMARY_SYNC_S = 60.0  # how long the end waits for the record writer to catch up before summarizing


class LaunchError(Exception):
    """Bad input: the message is one line meant for the user."""


class CensusError(Exception):
    """A census could not be taken; the message says why, in one line."""


@dataclass
class Options:
    record_dir: str | None = None
    interval_s: float = 0.2        # RSS rounds (statm): cheap
    pss_interval_s: float = 2.0    # PSS rounds (smaps_rollup): 0.5-14 ms a process
    host_interval_s: float = 1.0
    discover_interval_s: float = 0.5
    grace_s: float = 5.0           # SIGINT -> SIGTERM -> SIGKILL
    output: str = "inherit"        # "inherit" (CLI), "capture" (notebook: kept as a tail and recorded)
    agent: bool = True
    limit_bytes: int | None = None  # a budget to compare against, instead of the container's limit
    summary_json: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    script: str | None = None
    scalene: str | bool | None = None  # None, "cpu" or "memory": the script runs under Scalene, profiling off
    cuda_history: int | None = None  # entries of CUDA allocation history kept for the OOM snapshot (None: none)
    prometheus: str | None = None  # "[HOST:]PORT": serve the run's state to Prometheus (export/prometheus.py)
    hostname: str | None = None    # the hostname label (default: this machine's)
    pushgateway: str | None = None  # push the final state to this Pushgateway at the end
    prometheus_linger_s: float = 0.0  # keep the endpoint up this long after the end, for a last scrape


@dataclass
class Snapshot:
    """The latest of everything, for views that poll instead of subscribing."""
    t: float = 0.0
    procs: dict[int, dict[str, Any]] = field(default_factory=dict)   # pid -> role, name, rss, pss, alive
    tree_rss: int = 0
    tree_pss: int | None = None
    peak_rss: int = 0
    peak_pss: int | None = None
    host: HostSample | None = None


def resolve_command(argv: Sequence[str], cwd: str | None = None) -> tuple[list[str], str | None]:
    """A first argument ending in .py runs with this Python; returns (command, user's script or None).

    Relative paths are checked where the command will run (``cwd``), as the child will resolve them."""
    argv = list(argv)
    if not argv:
        raise LaunchError("no command given: memscope run train.py [args] | memscope run -- CMD [args]")
    here = os.path.abspath(cwd) if cwd else os.getcwd()
    if cwd is not None and not os.path.isdir(here):
        raise LaunchError(f"{cwd}: no such directory (cwd)")

    def at(path: str) -> str:
        return os.path.join(here, path)

    first = argv[0]
    if first.endswith(".py"):
        if not os.path.exists(at(first)):
            raise LaunchError(f"{first}: no such file" + (f" in {cwd}" if cwd else ""))
        if os.path.isdir(at(first)):
            raise LaunchError(f"{first} is a directory, not a script")
        try:
            with open(at(first), "rb") as f:
                compile(f.read(), first, "exec")
        except SyntaxError as exc:
            raise LaunchError(f"{first}, line {exc.lineno}: SyntaxError: {exc.msg}") from None
        except (OSError, ValueError) as exc:
            raise LaunchError(f"{first}: cannot read it: {exc}") from None
        return [sys.executable, *argv], os.path.normpath(at(first))
    if os.path.isdir(at(first)) and os.sep in first:
        raise LaunchError(f"{first} is a directory, not a command or a script")
    path = shutil.which(first) if os.sep not in first else first
    if os.sep in first:
        if not os.path.exists(at(first)):
            raise LaunchError(f"{first}: no such file")
        if os.path.isdir(at(first)):
            raise LaunchError(f"{first} is a directory, not a command")
        if not os.access(at(first), os.X_OK):
            raise LaunchError(f"{first} is not executable (chmod +x it, or run it with its interpreter)")
    elif path is None:
        if os.path.isdir(at(first)):
            raise LaunchError(f"{first} is a directory, not a command or a script")
        raise LaunchError(f"{first}: command not found")
    # python script.py / bash script.sh: check the script the interpreter is about to run.
    script = None
    base = os.path.basename(first)
    if base.startswith("python") and len(argv) > 1 and argv[1].endswith(".py"):
        resolve_command(argv[1:], cwd)
        script = os.path.normpath(at(argv[1]))
    elif base in ("bash", "sh", "zsh") and len(argv) > 1 and not argv[1].startswith("-"):
        if not os.path.isfile(at(argv[1])):
            raise LaunchError(f"{argv[1]}: no such file")
    return argv, script


def check_record_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise LaunchError(f"cannot create the record directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise LaunchError(f"cannot write to the record directory {path}")


def check_summary_path(path: str) -> None:
    """Refuse up front a summary path that cannot be written: a directory, or no writable directory for it."""
    if os.path.isdir(path):
        raise LaunchError(f"cannot write the summary to {path}: it is a directory")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d) or not os.access(d, os.W_OK | os.X_OK):
        raise LaunchError(f"cannot write the summary to {path}: no writable directory {d}")


class Run:
    """A command running under memscope (or a tree it attached to)."""

    def __init__(self, command: Sequence[str] | None = None, *, attach: int | None = None,
                 options: Options | None = None, say: Callable[[str], None] | None = None) -> None:
        self.options = o = options or Options()
        # Where memscope's own lines about this run go (warnings, the summary's path, the exporter's word): stderr
        # in a terminal; in a notebook, the view of the cell that started the run (a print from a background
        # thread would land in whichever cell is running then).
        self.say: Callable[[str], None] = say or _say
        for name in ("interval_s", "pss_interval_s", "host_interval_s", "discover_interval_s", "grace_s"):
            v = getattr(o, name)
            # NaN makes a busy loop, inf a sampler that never wakes: refuse both here too (the API's door).
            if not isinstance(v, (int, float)) or not (0 < v <= 86400):
                raise LaunchError(f"{name} must be a number of seconds above 0 and at most 86400, not {v!r}")
        if o.limit_bytes is not None and not (isinstance(o.limit_bytes, int) and 0 < o.limit_bytes < 2**63):
            raise LaunchError(f"limit_bytes must be a positive number of bytes, not {o.limit_bytes!r}")
        if attach is not None:
            import psutil

            if not psutil.pid_exists(attach) or attach <= 0:
                raise LaunchError(f"no process with pid {attach}")
            try:
                self.command = psutil.Process(attach).cmdline() or [str(attach)]
            except psutil.Error as exc:
                raise LaunchError(f"cannot watch pid {attach}: {exc}") from None
            self.script = o.script
        else:
            self.command, detected = resolve_command(command or [], o.cwd)
            self.script = o.script or detected
        self.attached = attach is not None
        self.record_dir = os.path.abspath(o.record_dir or default_record_dir())
        check_record_dir(self.record_dir)
        if o.summary_json:
            check_summary_path(o.summary_json)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.run_id = f"{stamp}-{secrets.token_hex(3)}"
        self.record_path = os.path.join(self.record_dir, f"{self.run_id}.sqlite")
        self.scalene = self._scalene_session()
        self.exporter: Any = None
        self._listen = self._export_options()
        try:
            self._recorder = Recorder(self.record_path, warn=self._record_trouble)
        except Exception as exc:  # sqlite3.Error, OSError
            raise LaunchError(f"cannot write the record {self.record_path}: {exc}") from None
        self.pid: int = attach or 0
        self.status = "starting"
        self.returncode: int | None = None
        self.exit: dict[str, Any] | None = None
        self._summary: dict[str, Any] | None = None
        self._token = secrets.token_hex(16)
        self._dir = tempfile.mkdtemp(prefix="memscope-")  # 0700: socket and crash files
        self._subs: list[_Subscriber] = []
        self._subs_lock = threading.Lock()
        self._ended = threading.Event()
        self._sampling_done = threading.Event()
        self._stop_requested: str | None = None
        self._detached = False
        self._cg: host_mod.Cgroup | None = None
        self._cgf = host_mod.CgroupFollower()
        self._ended_early = threading.Event()
        self._stop_lock = threading.Lock()
        self._maxrss: int | None = None
        self.snapshot = Snapshot()
        self.output_tail: collections.deque[str] = collections.deque(maxlen=200)
        self._readers: dict[str, Any] = {}  # stream name -> collect.output.LineReader (capture mode)
        # Capture mode: the run writes its output to these files beside the record, removed once read at the end.
        # A run that outlives its kernel keeps writing there (no pipe to break), and its output stays findable.
        base = os.path.join(self.record_dir, self.run_id)
        self.output_files = (base + ".stdout", base + ".stderr") if o.output == "capture" else None
        self._output_done = threading.Event()  # every writer of the output files is gone
        self._proc: subprocess.Popen | None = None
        self._subreaper = False
        self._sup = supervise.Supervisor(0, self.attached, dict, lambda: True)  # replaced at start()
        self._warned: set[str] = set()   # degradations already said once (descriptors, unreadable PSS)
        self._episodes = 0
        self._exited_order: collections.deque[int] = collections.deque()
        self._server = None
        self._threads: list[threading.Thread] = []
        self._on_end: list[Callable[[Run], None]] = []
        self.t0 = time.monotonic()
        self._census_waiting: dict[str, tuple[threading.Event, list[Any]]] = {}
        self._last_census: dict[str, Any] | None = None
        self._census_lock = threading.Lock()

    # -- public API ------------------------------------------------------------------------------------------
    def start(self) -> "Run":
        o = self.options
        env = dict(os.environ if o.env is None else o.env)
        marker_value = self.run_id
        if o.prometheus or o.pushgateway:
            self._start_exporter()  # first: a port already taken must stop us before anything runs
        if not self.attached:
            env[protocol.ENV_RUN] = marker_value
            if o.agent:
                from .collect.server import AgentServer

                sock = os.path.join(self._dir, "agent.sock")
                self._server = AgentServer(sock, self._token, self._on_agent_message)
                self._server.start()
                env.update({protocol.ENV_SOCK: sock, protocol.ENV_TOKEN: self._token,
                            protocol.ENV_DIR: self._dir})
                if self.script:
                    env[protocol.ENV_SCRIPT] = self.script
                if o.cuda_history:
                    env["MEMSCOPE_CUDA_HISTORY"] = str(int(o.cuda_history))
                env["PYTHONPATH"] = os.pathsep.join([AGENT_SITE] + [p for p in [env.get("PYTHONPATH")] if p])
            if o.output == "capture":
                env.setdefault("PYTHONUNBUFFERED", "1")
            # The subreaper first: an orphan made in the run's first milliseconds must come to memscope too.
            self._subreaper = supervise.hold_subreaper()
            try:
                self._proc = supervise.launch(self.command, o.cwd, env, self.output_files)
            except OSError as exc:
                self._abort()
                raise LaunchError(f"{self.command[0]}: {exc.strerror or exc}") from None
            self.pid = self._proc.pid
        self.t0 = time.monotonic()
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self._recorder.begin(self.run_id, list(self.command), os.path.abspath(o.cwd or os.getcwd()),
                             self.started_at, time.time(), self.pid,
                             {"attached": self.attached, "script": self.script, "agent": o.agent,
                              "limit_bytes": o.limit_bytes,
                              "interval_s": o.interval_s, "pss_interval_s": o.pss_interval_s,
                              "scalene": self.scalene.mode if self.scalene else None})
        marker = None if self.attached else f"{protocol.ENV_RUN}={marker_value}".encode()
        root_stat = _stat(self.pid)
        # A process we launched owns its session; one we attached to may share its shell's: no session proof then.
        membership = supervise.Membership(
            self.pid, session=None if self.attached else self.pid, marker=marker,
            started_ticks=root_stat.starttime if root_stat else None,
            reparented=self._subreaper and not self.attached)
        self.tree = TreeSampler(self.pid, self._publish, self._clock, marker=marker, script=self.script,
                                membership=membership, reap=supervise.reap)
        self._sup = supervise.Supervisor(self.pid, self.attached, self.tree.members,
                                         lambda: self.returncode is not None or self._proc is None,
                                         on_sent=self._signal_sent)
        self.status = "running"
        self._spawn(self._rss_loop, "memscope-rss")
        self._spawn(self._pss_loop, "memscope-pss")
        self._spawn(self._wait_loop, "memscope-waiter")
        from .collect import gpu as gpu_mod

        nvml = gpu_mod.Nvml.open()  # None without a driver: no thread, nothing recorded
        if nvml is not None:
            self._spawn(lambda: gpu_mod.sample_loop(nvml, self._publish, self._clock, self.tree.alive_pids,
                                                    self._sampling_done, o.host_interval_s), "memscope-gpu")
        if self._proc is not None and self.output_files:
            for name, path in zip(("stdout", "stderr"), self.output_files):
                self._spawn(lambda name=name, path=path: self._read_output(path, name), f"memscope-{name}")
        return self

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Wait for the run to end; returns the summary, or None on timeout."""
        if not self._ended.wait(timeout):
            return None
        return self._summary

    def stop(self, grace_s: float | None = None, wait: bool = True) -> None:
        """Stop the whole tree gracefully: SIGINT (as Ctrl-C would), SIGTERM after a grace period, then SIGKILL."""
        grace = self.options.grace_s if grace_s is None else grace_s
        with self._stop_lock:
            if self._ended.is_set() or self._stop_requested:
                first = False
            else:
                self._stop_requested, first = "stop", True
        if first:
            self._publish(Event(self._clock(), None, "stop_requested", {"how": "stop", "grace_s": grace}))
            self._spawn(lambda: self._sup.stop_sequence(grace, self._root_gone), "memscope-stopper")
        if wait:
            self._ended.wait()

    def terminate(self, grace_s: float | None = None, wait: bool = True) -> None:
        """What systemd and docker do on a stop: SIGTERM to every process of the run (a training may save a
        checkpoint on it), SIGKILL to what is left after the grace period."""
        grace = self.options.grace_s if grace_s is None else grace_s
        with self._stop_lock:
            first = not (self._ended.is_set() or self._stop_requested)
            if first:
                self._stop_requested = "terminate"
        if first:
            self._publish(Event(self._clock(), None, "stop_requested", {"how": "terminate", "grace_s": grace}))
            self._spawn(lambda: self._sup.stop_sequence(grace, self._root_gone, first=signal.SIGTERM),
                        "memscope-stopper")
        if wait:
            self._ended.wait()

    def kill(self, wait: bool = True) -> None:
        """SIGKILL every process of the tree now."""
        with self._stop_lock:
            self._stop_requested = "kill"
        self._publish(Event(self._clock(), None, "stop_requested", {"how": "kill"}))
        self._sup.signal_run(signal.SIGKILL)
        if wait:
            self._ended.wait()

    def forward(self, sig: int) -> None:
        """Pass a signal memscope received on to the run, as a terminal would to its foreground group (SIGHUP),
        and to each member that left the group."""
        if self._ended.is_set():
            return
        self._publish(Event(self._clock(), None, "signal_forwarded", {"signal": signal_name(sig)}))
        self._sup.signal_run(sig)

    def suspend(self) -> None:
        """Ctrl-Z: stop every process of the run (SIGSTOP: the run's group is orphaned, so SIGTSTP could be
        discarded by the kernel)."""
        if not self._ended.is_set():
            self._publish(Event(self._clock(), None, "suspended", {}))
            self._sup.signal_run(signal.SIGSTOP)

    def resume(self) -> None:
        """fg / bg: continue every process of the run."""
        if not self._ended.is_set():
            self._sup.signal_run(signal.SIGCONT)
            self._publish(Event(self._clock(), None, "resumed", {}))

    def detach(self) -> None:
        """Stop watching (attach mode): the process goes on; the record ends here."""
        self._publish(Event(self._clock(), None, "detached", {}))
        self._detached = True
        self._ended_early.set()

    def summary(self) -> dict[str, Any]:
        """The summary: final once the run ended, else what the record says so far (exit cause "running")."""
        if self._summary is not None:
            return self._summary
        s = self._summarize_record()
        s["exit"] = self._exit("running", f"The run is still going ({self._clock():.0f} s so far).")
        return s

    def limit(self) -> dict[str, Any] | None:
        """The limit the run is compared against now, and its source ("flag", "cgroup" or "host"), as the summary's
        ``limit`` says it."""
        h = self.snapshot.host
        if self.options.limit_bytes:
            return {"bytes": self.options.limit_bytes, "source": "flag"}
        if h is None:
            return None
        return {"bytes": h.limit, "source": "cgroup"} if h.limit else {"bytes": h.total, "source": "host"}

    def scalene_snapshot(self, seconds: float = 10.0) -> "ScaleneSnapshot":
        """Profile the running script with Scalene for ``seconds`` and return that window's hot lines (``.top``)
        and the path of Scalene's full HTML report (``.html_path``); recorded as a "scalene_snapshot" event.

        Raises ScaleneError (one line) when the run is not under Scalene (``scalene=True``), has ended, or has
        no agent in the profiled process.
        """
        from .scalene import HOW_TO, ScaleneError

        if self.scalene is None:
            raise ScaleneError(f"this run is not under Scalene; {HOW_TO}")
        if self._ended.is_set():
            raise ScaleneError("the run has ended")
        if not self.options.agent:
            raise ScaleneError("snapshots need memscope's agent in the profiled process (not --no-agent)")
        t = self._clock()
        snap = self.scalene.snapshot(seconds, self._ended.is_set)
        snap.t_s = round(t, 3)
        self._publish(Event(t, snap.pid, "scalene_snapshot", snap.to_dict()))
        return snap

    def _scalene_session(self) -> "ScaleneSession | None":
        from . import scalene as scalene_mod

        try:
            mode = scalene_mod.mode_of(self.options.scalene)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
        if mode is None:
            return None
        if self.attached:
            raise LaunchError("--scalene starts the script under Scalene; it cannot attach to a running process")
        if self.command[0] == sys.executable and not scalene_mod.available():
            raise LaunchError("--scalene: Scalene is not installed here (pip install 'memscope[scalene]')")
        session = scalene_mod.ScaleneSession(mode, os.path.join(self.record_dir, f"{self.run_id}-scalene"),
                                             self.command[0])
        try:
            self.command = scalene_mod.wrap_command(self.command, self.script, mode, session.outfile)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
        os.makedirs(session.dir, exist_ok=True)
        return session

    def _export_options(self) -> tuple[str, int] | None:
        """Check --prometheus/--pushgateway before anything starts; returns where to listen."""
        o = self.options
        if not (o.prometheus or o.pushgateway):
            return None
        from .export import prometheus as prom

        try:
            if o.pushgateway:
                o.pushgateway = prom.check_pushgateway(o.pushgateway)
            return prom.parse_listen(str(o.prometheus)) if o.prometheus else None
        except ValueError as exc:
            raise LaunchError(str(exc)) from None

    def _start_exporter(self) -> None:
        from .export.prometheus import Exporter

        o = self.options
        self.exporter = Exporter.for_run(self, o.hostname)
        if self._listen is not None:
            host, port = self._listen
            try:
                self.exporter.serve(host, port)
            except OSError as exc:
                self._abort()
                raise LaunchError(f"--prometheus {o.prometheus}: cannot listen on {host}:{port}: "
                                  f"{exc.strerror or exc}") from None
        self._on_end.insert(0, lambda _run: self.exporter.finish(
            o.pushgateway, o.prometheus_linger_s, self.say))

    def census(self, timeout: float = 30.0) -> "Census":
        """Take a tensor census in the main process: torch tensors by device, dtype and shape (count, bytes, how
        many hold a grad_fn), Python types, the largest containers, and the difference from the previous census.

        Raises CensusError (one line) when the run has no agent in its main process or does not answer.
        """
        from .analysis.census import Census, advice, diff

        with self._census_lock:  # one at a time: each diff is against the one before
            if self._ended.is_set():
                raise CensusError("the run has ended: a census needs the process alive")
            if self._server is None:
                raise CensusError("this run has no agent (attached, or started with --no-agent): no census")
            pid = self._main_pid()
            req = secrets.token_hex(4)
            done, box = threading.Event(), []
            self._census_waiting[req] = (done, box)
            try:
                if not self._server.request(pid, {"t": "census", "id": req}):
                    raise CensusError(f"the main process (pid {pid}) has no memscope agent to ask "
                                      "(not Python, or started with python -I)")
                if not done.wait(timeout):
                    raise CensusError(f"the main process (pid {pid}) did not answer within {timeout:g} s")
            finally:
                self._census_waiting.pop(req, None)
            t, data = box[0]
            if data.get("error"):
                raise CensusError(f"the census failed in pid {pid}: {data['error']}")
            data.update(pid=pid, t_s=round(t, 3))
            data["diff"] = diff(self._last_census, data)
            data["advice"] = advice(data["diff"])
            self._last_census = data
            self._publish(Event(t, pid, "census", data))
            return Census.from_dict(data)

    def subscribe(self, fn: Callable[[Record], None], maxsize: int = 10000) -> Callable[[], None]:
        """Call ``fn(record)`` for every new record, on a thread of its own; returns an unsubscribe function.

        A slow subscriber never slows the collectors: past ``maxsize`` queued records, the oldest are dropped.
        """
        sub = _Subscriber(fn, maxsize)
        with self._subs_lock:
            self._subs.append(sub)
        sub.start()

        def unsubscribe() -> None:
            with self._subs_lock:
                if sub in self._subs:
                    self._subs.remove(sub)
            sub.close()
        return unsubscribe

    def on_end(self, fn: Callable[["Run"], None]) -> None:
        self._on_end.append(fn)
        if self._ended.is_set():
            fn(self)

    def __repr__(self) -> str:
        cause = f" {self.exit['cause']}" if self.exit else ""
        return f"<memscope.Run {self.run_id} pid={self.pid} {self.status}{cause}>"

    # -- internals -------------------------------------------------------------------------------------------

    def _clock(self) -> float:
        return time.monotonic() - self.t0

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        th = threading.Thread(target=target, name=name, daemon=True)
        th.start()
        self._threads.append(th)

    def _publish(self, rec: Record) -> None:
        self._recorder.put(rec)
        self._update_snapshot(rec)
        with self._subs_lock:
            subs = list(self._subs)
        for s in subs:
            s.put(rec)

    def _update_snapshot(self, rec: Record) -> None:
        s = self.snapshot
        if isinstance(rec, TreeSample):
            s.t = rec.t
            for p in rec.procs:
                d = s.procs.setdefault(p.pid, {"role": "other", "name": "", "alive": True})
                if p.rss or "rss" not in d:  # a zombie reads 0: keep its last real figure in the table
                    # One moment per row: RSS, private and PSS (measured, or carried to this round) together.
                    d.update(rss=p.rss, private=p.private, pss=p.est_pss, t=rec.t)
                    d["peak_rss"] = max(d.get("peak_rss") or 0, p.rss)
                    if p.est_pss is not None:
                        d["peak_pss"] = max(d.get("peak_pss") or 0, p.est_pss)
                if p.pss is not None:
                    d.update(pss_measured=p.pss, pss_t=rec.t, swap=p.swap, anon=p.anon, file=p.file)
            if rec.kind == "rss":
                s.tree_rss = rec.rss_total
                s.peak_rss = max(s.peak_rss, s.tree_rss)
            total = rec.est_total if rec.procs else None
            if total is not None:
                s.tree_pss = total
                s.peak_pss = max(s.peak_pss or 0, total)
        elif isinstance(rec, HostSample):
            s.host = rec
        elif isinstance(rec, ProcessSeen):
            d = s.procs.setdefault(rec.pid, {"alive": True})
            d.update(role=rec.role, name=rec.name, cmdline=rec.cmdline)
        elif isinstance(rec, ProcessExited):
            d = s.procs.setdefault(rec.pid, {"role": "other", "name": ""})
            if d.get("alive", True):
                self._exited_order.append(rec.pid)
            d.update(alive=False, exit_code=rec.exit_code, exit_signal=rec.exit_signal)
            # A run that forks 50 processes a second: the live table keeps the latest exits, the record all.
            while len(self._exited_order) > SNAPSHOT_EXITED:
                old = self._exited_order.popleft()
                if old != self.pid and not s.procs.get(old, {}).get("alive", False):
                    s.procs.pop(old, None)

    def _on_agent_message(self, pid: int, msg: dict[str, Any]) -> None:
        kind = str(msg.pop("t", "message"))
        t = self._clock()
        if kind == "hello":
            # ``pid`` is the kernel's (SO_PEERCRED); the one the message claims is only recorded: in a PID
            # namespace it is not a host pid, and a token holder could name any process.
            argv = msg.get("orig_argv") or msg.get("argv") or []
            ppid = msg.get("ppid") if isinstance(msg.get("ppid"), int) else 0
            proof = self.tree.adopt(pid, ppid, [str(a) for a in argv] if isinstance(argv, list) else [],
                                    bool(msg.get("runs_script")) and not msg.get("forked"))
            if proof is None:
                self._publish(Event(t, pid, "agent_refused", {
                    "claimed_pid": msg.get("pid"), "reason": "not proven part of the run (not a descendant of "
                    "its root, not in its session, no marker in its environment)"}))
                return
            self._publish(Event(t, pid, "agent_hello", dict(msg, membership=proof)))
            if not msg.get("forked"):  # a Python main says hello at once: catch a move before it can be OOM-killed
                self._follow_cgroup()
        elif kind == "role":
            self.tree.hint_role(pid, str(msg.get("role")))
        elif kind == "scalene":
            if self.scalene is not None:
                self.scalene.on_agent_message(pid, dict(msg))
            self._publish(Event(t, pid, "scalene", msg))
        elif kind == "census":
            waiting = self._census_waiting.get(str(msg.pop("id", "")))
            if waiting is not None:  # recorded by census() itself, with its diff
                waiting[1].append((t, msg))
                waiting[0].set()
        else:
            self._publish(Event(t, pid, f"agent_{kind}" if kind == "exception" else kind, msg))

    def _rss_loop(self) -> None:
        o = self.options
        next_discover = next_host = 0.0
        while not self._sampling_done.is_set():
            start = self._clock()
            try:
                if start >= next_discover:
                    self.tree.discover()
                    next_discover = start + o.discover_interval_s
                self.tree.rss_round()
                self.tree.settle()
                self._follow_cgroup()
                if start >= next_host:
                    if self._cg is None:
                        self._cg = host_mod.find_memory_cgroup()
                    self._host_sample(self._cg)
                    next_host = start + o.host_interval_s
                self._degraded_over("descriptors")
            except Unreadable as exc:  # out of descriptors: the round is lost, no process is taken for gone
                self._degraded("descriptors", exc)
            except Exception as exc:  # a sampler bug must not end the watch
                self._publish(Event(self._clock(), None, "collector_error", {"where": "rss", "error": repr(exc)}))
            self._sampling_done.wait(max(0.0, o.interval_s - (self._clock() - start)))

    def _follow_cgroup(self) -> None:
        moved = self._cgf.follow(self._main_pid())
        if moved is None:
            return
        cg, before = moved
        if before is not None:
            self._publish(Event(self._clock(), None, "cgroup_changed", {"from": before.path, "to": cg.path}))
        self._cg = cg
        self._host_sample(cg)  # the new counter's first reading: its rise is counted from here

    def _degraded(self, what: str, exc: OSError) -> None:
        """Say once per episode that memscope could not see (the summary lists it), not once per round."""
        if what in self._warned:
            return
        self._warned.add(what)
        self._episodes += 1
        if self._episodes > 10:
            return  # a limit that flaps: the first ten episodes tell the story
        self._publish(Event(self._clock(), None, "collector_degraded", {
            "what": what, "error": f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc)}))
        if self._episodes == 1:
            self.say(f"memscope: warning: cannot read /proc: {exc.strerror or exc}; samples are missing "
                     "until it can again (live processes are not taken for exited)")

    def _degraded_over(self, what: str) -> None:
        if what in self._warned:
            self._warned.discard(what)
            if self._episodes <= 10:
                self._publish(Event(self._clock(), None, "collector_recovered", {"what": what}))

    def _host_sample(self, cg: host_mod.Cgroup | None) -> None:
        h = host_mod.read_host_memory()
        if h.total == 0:
            return  # /proc/meminfo unreadable (out of descriptors): no sample rather than "0 bytes available"
        cm = host_mod.read_cgroup_memory(cg) if cg else None
        limit = self.options.limit_bytes or (cm.limit if cm else None)
        self._publish(HostSample(self._clock(), h.total, h.available, h.swap_total, h.swap_used,
                                 limit, cm.usage if cm else None, h.oom_kills, cm.oom_kills if cm else None))

    def _pss_loop(self) -> None:
        if self._sampling_done.wait(0.5):
            return
        while True:
            c0 = time.thread_time()
            try:
                sample = self.tree.pss_round()
                if "pss_unreadable" not in self._warned:
                    self._check_pss_readable(sample)
            except Unreadable as exc:
                self._degraded("descriptors", exc)
            except Exception as exc:
                self._publish(Event(self._clock(), None, "collector_error", {"where": "pss", "error": repr(exc)}))
            # smaps_rollup costs ~4 ms per torch-loaded process: on a big tree the rounds space out rather than
            # let memscope take more than PSS_CPU_BUDGET of a core from the training.
            soon = (time.thread_time() - c0) / PSS_CPU_BUDGET
            regular = max(self.options.pss_interval_s if self._clock() > 1 else 0.5, soon)
            # A fork that lived through that round unseen (forked while it ran) had taken its share of its
            # parent's pages, which the round did not count: then the next round comes as soon as the budget allows.
            t0 = time.monotonic()
            while True:
                left = (soon if self.tree.pss_wanted else regular) - (time.monotonic() - t0)
                if left <= 0:
                    break
                if self._sampling_done.wait(min(0.1, left)):
                    return

    def _check_pss_readable(self, sample: TreeSample) -> None:
        """Another user's process keeps smaps_rollup closed (ptrace rules): say so once, not a silent null."""
        from .collect import procfs

        have = {p.pid for p in sample.procs}
        pid = procfs.first_denied([p for p in self.tree.alive_pids() if p not in have], "smaps_rollup")
        if pid is None:
            return
        self._warned.add("pss_unreadable")
        msg = f"PSS of pid {pid} is unreadable: permission denied (another user's process)"
        self._publish(Event(self._clock(), pid, "pss_unreadable", {
            "reason": "permission", "message": msg + "; run memscope as that user or as root. RSS is shown instead."}))
        self.say(f"memscope: warning: {msg}; showing RSS")

    def _main_pid(self) -> int:
        for pid, d in list(self.snapshot.procs.items()):
            if d.get("role") == "main" and d.get("alive", True):
                return pid
        return self.pid

    def _wait_loop(self) -> None:
        if self._proc is not None:
            rc, maxrss = supervise.wait_root(self.pid)
            if rc is not None:
                self.returncode = rc
                self._proc.returncode = rc  # keep Popen from reaping again
                self._maxrss = maxrss
        else:
            from .collect.tree import _alive

            while _alive(self.pid) and not self._ended_early.wait(self.options.interval_s):
                pass
        self._finish()

    def _signal_sent(self, sig: int, pids: list[int], to: str = "tree") -> None:
        # What was really sent, for the verdict's words (SIGINT alone often ends a run).
        self._publish(Event(self._clock(), None, "signal_sent", {"signal": signal_name(sig), "to": to,
                                                                 "pids": list(pids)}))

    def _root_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.returncode is not None or self._ended.is_set():
                return True
            time.sleep(0.05)
        return False

    def _clean_leftovers(self) -> None:
        """Once the root is gone, no process of the tree may outlive the run."""
        if self._detached or self.attached:
            return
        self.tree.all_marked()  # one last full discovery: escapees, orphans re-parented to memscope
        left = self._sup.clean_leftovers(
            {p: st for p, st in self.tree.members().items() if p != self.pid}, self._stop_requested,
            lambda pids: self._publish(Event(self._clock(), None, "leftovers", {"pids": pids, "processes": [
                {"pid": p, "name": self.tree.procs[p].info.name,
                 "cmdline": " ".join(self.tree.procs[p].info.cmdline)[:200]} for p in pids if p in self.tree.procs]})))
        for pid, status in left.items():
            self.tree.mark_exited(pid, *supervise.decode_status(status))
        kept = [p for p in self.tree.unsignalled() if p != self.pid]
        if kept:
            self._publish(Event(self._clock(), None, "left_running", {"pids": kept, "processes": [
                {"pid": p, "cmdline": " ".join(self.tree.procs[p].info.cmdline)[:200]} for p in kept]}))

    def _finish(self) -> None:
        # Whatever fails in here, the run must reach "ended": wait() and the views depend on it.
        try:
            self._finish_steps()
        except Exception as exc:
            self._summary = self._summary or {
                "schema": "memscope.summary/1", "run_id": self.run_id,
                "exit": dict(self._exit("unknown", f"memscope failed while finishing: {exc!r}"),
                             code=self.returncode)}
            self.exit = self._summary["exit"]
            if self.options.summary_json:
                try:
                    _write_json(self.options.summary_json, self._summary)
                except OSError as exc:
                    self.say(f"memscope: cannot write the summary to {self.options.summary_json}: {exc}")
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)  # the socket and crash files, whatever happened
            self._output_done.set()
            if self._subreaper:
                self._subreaper = False
                supervise.release_subreaper()
            supervise.forget_launched(self.pid)
            self.status = "ended"
            self._ended.set()
        with self._subs_lock:
            subs = list(self._subs)
        for s in subs:
            s.close(drain=True)
        for fn in self._on_end:
            try:
                fn(self)
            except Exception:
                pass

    def _finish_steps(self) -> None:
        t = self._clock()
        if self._proc is not None and self.returncode is not None:
            code, sig = (None, signal_name(-self.returncode)) if self.returncode < 0 else (self.returncode, None)
            self.tree.mark_exited(self.pid, code, sig)
        if not self._detached:
            try:
                self.tree.pss_round()  # the last PSS of whatever is still alive
            except Exception:
                pass
            self._clean_leftovers()
        self._sampling_done.set()
        for th in self._threads:
            if th.name in ("memscope-rss", "memscope-pss"):
                th.join(timeout=5)
        if not self._detached:  # a detached run's processes go on writing to its output files
            self._end_output()
        running = set(self.tree.unsignalled())  # still alive, and said so: not "exited"
        for pid in self.tree.alive_pids():
            if self._detached:
                break
            if pid not in running or not supervise.same_process(pid, self.tree.procs[pid].start):
                self.tree.mark_exited(pid, None, None)
        try:
            self._host_sample(self._cg)  # OOM counters after the end: the evidence for an OOM kill
        except Exception:
            pass
        self._collect_crash_files()
        if self._server is not None:
            self._server.close()
            if self._server.throttled or self._server.accept_failures:
                self._publish(Event(self._clock(), None, "collector_degraded", {
                    "what": "agent_connections", "max": self._server.max_connections,
                    "accept_failures": self._server.accept_failures}))
        self._publish(Event(t, self.pid, "exit_status", {
            "returncode": self.returncode, "maxrss_bytes": self._maxrss, "stop_requested": self._stop_requested,
            "detached": self._detached}))
        summary = self._summarize_record()
        if self._detached:
            summary["exit"] = self._exit("detached", f"memscope stopped watching; pid {self.pid} is still running.")
        summary["duration_s"] = round(t, 3)
        self._summary, self.exit = summary, summary["exit"]
        self._publish(RunEnded(t, summary))
        self._recorder.close()
        if self.options.summary_json:
            try:
                _write_json(self.options.summary_json, summary)
            except OSError as exc:  # the run's own summary is still returned; the user is told once
                self.say(f"memscope: cannot write the summary to {self.options.summary_json}: {exc}")

    def _summarize_record(self) -> dict[str, Any]:
        """The summary as the record says it now. Everything published so far is flushed first: a summary read
        from a record its writer has not caught up with would judge a shorter run than the one that ran, so the
        wait is long (a loaded machine can put the writer seconds behind), and a summary that had to go without
        says so in ``record_errors``."""
        synced = self._recorder_sync(SUMMARY_SYNC_S)
        from .store import record_health

        # A record the disk refused in part: the summary reads it as memscope knows it (file + memory).
        rd = RunData(self.record_path, self._recorder.memory_copy() if self._recorder.lost_records else None)
        try:
            s = summarize(rd)
        finally:
            rd.close()
        health = record_health(self._recorder, self._server)
        if not synced:
            health = dict(health or {}, unsynced=f"the record's writer was still behind after {SUMMARY_SYNC_S:g} s: "
                                                 "this summary may miss the run's last records")
        if health:
            s["record_errors"] = health
        return s

    def _exit(self, cause: str, message: str) -> dict[str, Any]:
        """An ``exit`` object for the states the record cannot tell: running, detached, memscope failed."""
        return {"cause": cause, "code": None, "signal": None, "pid": self.pid, "message": message,
                "traceback": None}

    def _collect_crash_files(self) -> None:
        import json

        try:
            names = os.listdir(self._dir)
        except OSError:
            return
        for name in sorted(names):
            path = os.path.join(self._dir, name)
            try:
                if name.startswith(protocol.FAULT_PREFIX) and os.path.getsize(path) > 0:
                    pid = int(name[len(protocol.FAULT_PREFIX):].split(".")[0])
                    with open(path, errors="replace") as f:
                        text = f.read(200000)
                    self._publish(Event(self._clock(), pid, "fault", {"text": text}))
                    if protocol.FAULT_ECHO + "." in name:
                        self._echo_stderr(text)
                elif name.startswith(protocol.EXC_PREFIX) and name.endswith(".json"):
                    pid = int(name[len(protocol.EXC_PREFIX):].split(".")[0])
                    with open(path) as f:
                        self._publish(Event(self._clock(), pid, "exception", json.load(f)))
                elif name.startswith("cuda_snapshot_") and name.endswith(".pickle"):
                    from .collect.gpu import keep_snapshot

                    self._publish(Event(self._clock(), None, "cuda_snapshot",
                                        {"name": name, "path": keep_snapshot(path, self.record_path)}))
            except (OSError, ValueError):
                continue

    def _record_trouble(self, line: str) -> None:
        """The recorder's one warning (a full disk): said on stderr, and to the live views as an event."""
        self.say(line)
        try:
            self._publish(Event(self._clock(), None, "record_error", {"error": line}))
        except Exception:
            pass

    def _echo_stderr(self, text: str) -> None:
        """The user's own faulthandler output (PYTHONFAULTHANDLER=1), which the agent's file took: to the run's
        stderr, where the user asked for it."""
        if self.options.output == "capture":
            self._publish(Event(self._clock(), self.pid, "output", {"stream": "stderr", "text": text}))
            self.output_tail.extend(text.rstrip("\n").split("\n"))
        else:
            self.say(text.rstrip("\n"))

    def _recorder_sync(self, timeout: float = 5.0) -> bool:
        return self._recorder.sync(timeout)

    def _read_output(self, path: str, name: str) -> None:
        from .collect.output import LineReader, follow

        def on_text(text: str) -> None:
            self._publish(Event(self._clock(), self.pid, "output", {"stream": name, "text": text}))

        reader = LineReader(on_text, self.output_tail)
        self._readers[name] = reader
        follow(path, reader, self._output_done)

    def _end_output(self) -> None:
        """Once every process of the run is gone: read the output files to their end, then remove them (what they
        held is in the record)."""
        self._output_done.set()
        readers = [th for th in self._threads if th.name in ("memscope-stdout", "memscope-stderr")]
        for th in readers:
            th.join(timeout=10)
        if self.output_files and not any(th.is_alive() for th in readers):
            for path in self.output_files:
                try:
                    os.unlink(path)
                except OSError:
                    pass

    @property
    def output_partial(self) -> str:
        """The line being written (a progress bar), not yet ended by a newline."""
        return next((r.partial for r in self._readers.values() if r.partial), "")

    def _abort(self) -> None:
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        if self._subreaper:
            self._subreaper = False
            supervise.release_subreaper()
        if self._server is not None:
            self._server.close()
        self._recorder.close()
        try:
            os.unlink(self.record_path)
            for path in [self.record_path + "-wal", self.record_path + "-shm", *(self.output_files or ())]:
                if os.path.exists(path):
                    os.unlink(path)
        except OSError:
            pass
        shutil.rmtree(self._dir, ignore_errors=True)


def _stat(pid: int) -> Any:
    from .collect import procfs

    try:
        return procfs.read_stat(pid) if pid > 0 else None
    except OSError:
        return None


class _Subscriber:
    def __init__(self, fn: Callable[[Record], None], maxsize: int) -> None:
        self._fn = fn
        self._q: queue.Queue = queue.Queue(maxsize)
        self._thread = threading.Thread(target=self._loop, name="memscope-subscriber", daemon=True)
        self.dropped = 0

    def start(self) -> None:
        self._thread.start()

    def put(self, rec: Record) -> None:
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
        self.put(None)  # type: ignore[arg-type]
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


def _write_json(path: str, obj: Any) -> None:
    """Write ``obj`` to ``path`` whole or not at all: no partial file and no temporary left behind on failure."""
    import json

    fd, tmp = tempfile.mkstemp(prefix=".memscope-summary-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a summary is meant to be read (CI, a colleague)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
