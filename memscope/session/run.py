"""Run: launch a command in its own session under memscope, watch its tree, stop it, and say why it ended.

Usable from plain Python (``memscope.run([...])``), the CLI and the notebook alike. Threads, none of which
waits on another: the waiter (os.wait4 on the root), the RSS sampler (with discovery and host reads), the PSS
sampler, the agent server, the recorder, one dispatcher per subscriber, and at the start the import of the
analyses (``finish.load_analyses``). This module is the public handle; the work is in ``options``, ``launch``,
``sampling``, ``agents``, ``finish`` and ``scalene`` beside it. Exporters and views attach from outside through
``subscribe``, ``on_end`` and ``elapsed`` (``wiring.RUN_ATTACHMENTS``).
"""

from __future__ import annotations

import collections
import os
import secrets
import signal
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Generic, Sequence, TypeVar, overload

from .. import supervise, wiring
from ..collect.tree import TreeSampler
from ..errors import LaunchError
from ..fmt import signal_name, stderr_line
from ..model import Event, ExitInfo, Limit, Record, Summary
from ..record.catalogue import default_record_dir
from ..record.writer import Recorder
from . import finish as finish_mod
from . import launch as launch_mod
from . import scalene as scalene_mod
from .agents import Agents
from .live import Snapshot
from .options import Options, attach_target, check_options, check_record_dir, check_summary_path, resolve_command
from .sampling import Sampler
from .stacks import StackTaker
from .state import RunState
from .verdict import LiveVerdict

if TYPE_CHECKING:
    from ..analysis.census import Census
    from ..analysis.stacks import Stacks
    from ..collect.server import AgentServer
    from .scalene import ScaleneSnapshot


# The runs this process started, by record path, while something holds them (a running run's threads do): how
# ``memscope.reopen(run_id)`` of a run still going in this kernel finds it and follows it live.
_started: "weakref.WeakValueDictionary[str, Run]" = weakref.WeakValueDictionary()


def started_here(record_path: str) -> "Run | None":
    """The Run of this process that writes ``record_path``, if it is still held (a running one always is)."""
    return _started.get(os.path.abspath(record_path))


_T = TypeVar("_T")


class _Shared(Generic[_T]):
    """An attribute of ``Run`` that is its state's field of the same name (a leading underscore dropped)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name.lstrip("_")

    @overload
    def __get__(self, obj: None, owner: type) -> "_Shared[_T]": ...
    @overload
    def __get__(self, obj: Run, owner: type) -> _T: ...
    def __get__(self, obj: Run | None, owner: type) -> "_T | _Shared[_T]":
        if obj is None:
            return self
        return getattr(obj.state, self.field)

    def __set__(self, obj: Run, value: _T) -> None:
        setattr(obj.state, self.field, value)


class Run:
    """A command running under memscope (or a tree it attached to)."""

    # Its state's fields, read and written through (``RunState`` types them; the parts use the state itself).
    options = _Shared[Options]()
    say = _Shared[Callable[[str], None]]()  # memscope's own lines about the run: stderr, or the cell's view
    command = _Shared[list[str]]()
    script = _Shared[str | None]()
    attached = _Shared[bool]()
    record_dir = _Shared[str]()
    run_id = _Shared[str]()
    record_path = _Shared[str]()
    output_files = _Shared[tuple[str, str] | None]()
    pid = _Shared[int]()
    status = _Shared[str]()
    returncode = _Shared[int | None]()
    exit = _Shared[ExitInfo | None]()
    snapshot = _Shared[Snapshot]()
    output_tail = _Shared[collections.deque[str]]()
    tree = _Shared[TreeSampler]()
    started_at = _Shared[str]()
    t0 = _Shared[float]()
    _sup = _Shared[supervise.Supervisor]()  # the tests reach into these two
    _root_exited = _Shared[threading.Event]()

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        attach: int | None = None,
        options: Options | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        o = options or Options()
        check_options(o)
        if attach is not None:
            cmd, script = attach_target(attach), o.script
        else:
            cmd, detected = resolve_command(command or [], o.cwd)
            script = o.script or detected
        record_dir = os.path.abspath(o.record_dir or default_record_dir())
        check_record_dir(record_dir)
        if o.summary_json:
            check_summary_path(o.summary_json)
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        # Where memscope's own lines about this run go (warnings, the summary's path, the exporter's word): stderr
        # in a terminal; in a notebook, the view of the cell that started the run (a print from a background
        # thread would land in whichever cell is running then).
        self.state = st = RunState(
            options=o,
            say=say or stderr_line,
            command=cmd,
            script=script,
            attached=attach is not None,
            record_dir=record_dir,
            run_id=run_id,
            record_path=os.path.join(record_dir, f"{run_id}.sqlite"),
        )
        self.scalene = scalene_mod.prepare(st)
        # Exporters watch from outside; the top of the package registers them (wiring), the run never imports them.
        self.attachments: dict[str, wiring.Attachment] = {}
        self.attaching = [a for a in (make(self) for make in wiring.RUN_ATTACHMENTS) if a is not None]
        try:
            st.recorder = Recorder(st.record_path, warn=st.record_trouble)
        except Exception as exc:  # sqlite3.Error, OSError
            raise LaunchError(f"cannot write the record {st.record_path}: {exc}") from None
        st.pid = attach or 0
        # Capture mode: the run writes its output to these files beside the record, removed once read at the end.
        # A run that outlives its kernel keeps writing there (no pipe to break), and its output stays findable.
        base = os.path.join(record_dir, run_id)
        st.output_files = (base + ".stdout", base + ".stderr") if o.output == "capture" else None
        self.stack_taker = StackTaker(st)
        self.sampler = Sampler(st, self.stack_taker)
        self.agents = Agents(st, self.scalene, self.stack_taker, self.sampler)
        self.live_verdict = LiveVerdict(self)  # the one live verdict every view reads (session/verdict.py)
        st.t0 = time.monotonic()

    # -- public API ------------------------------------------------------------------------------------------
    def start(self) -> "Run":
        """Launch the command (or start watching the attached tree); returns at once with the run going."""
        launch_mod.launch(self)
        _started[os.path.abspath(self.state.record_path)] = self
        return self

    @property
    def ended(self) -> bool:
        """Whether the run has ended (its summary is final)."""
        return self.state.is_ended

    def elapsed(self) -> float:
        """Seconds since the run started, on the clock every record's ``t`` uses."""
        return self.state.elapsed()

    _clock = elapsed  # the name the tests and older callers use

    def wait(self, timeout: float | None = None) -> Summary | None:
        """Wait for the run to end; returns the summary, or None on timeout."""
        if not self.state.ended.wait(timeout):
            return None
        return self.state.summary

    def stop(self, grace_s: float | None = None, wait: bool = True) -> None:
        """Stop the whole tree gracefully: SIGINT (as Ctrl-C would), SIGTERM after a grace period, then SIGKILL."""
        self._stop("stop", grace_s, None, wait)

    def terminate(self, grace_s: float | None = None, wait: bool = True) -> None:
        """What systemd and docker do on a stop: SIGTERM to every process of the run (a training may save a
        checkpoint on it), SIGKILL to what is left after the grace period."""
        self._stop("terminate", grace_s, signal.SIGTERM, wait)

    def _stop(self, how: str, grace_s: float | None, first_sig: int | None, wait: bool) -> None:
        st = self.state
        if st.attached:  # memscope did not start it: stopping means to stop watching, never a signal
            self.detach()
            if wait:
                st.ended.wait()
            return
        grace = st.options.grace_s if grace_s is None else grace_s
        with st.stop_lock:
            after_end = self._root_has_exited()
            first = not (st.ended.is_set() or st.stop_requested or after_end)
            if first:
                st.stop_requested = how
        if after_end:
            self._stop_leftovers(how, signal.SIGTERM)
        elif first:
            self.publish(Event(self.elapsed(), None, "stop_requested", {"how": how, "grace_s": grace}))
            kw = {} if first_sig is None else {"first": first_sig}
            st.spawn(lambda: st.sup.stop_sequence(grace, self._root_gone, **kw), "memscope-stopper")
        if wait:
            st.ended.wait()

    def kill(self, wait: bool = True) -> None:
        """SIGKILL every process of the tree now (an attached run: stop watching it)."""
        st = self.state
        if st.attached:
            self.detach()
            if wait:
                st.ended.wait()
            return
        with st.stop_lock:
            after_end = self._root_has_exited()
            if not after_end:
                st.stop_requested = "kill"
        if after_end:
            self._stop_leftovers("kill", signal.SIGKILL)
        else:
            self.publish(Event(self.elapsed(), None, "stop_requested", {"how": "kill"}))
            st.sup.signal_run(signal.SIGKILL)
        if wait:
            st.ended.wait()

    def _root_has_exited(self) -> bool:
        # The waiter sets _root_exited once wait4 returns; a zombie root has exited too (the waiter is on its way).
        st = self.state
        if st.root_exited.is_set():
            return True
        return st.proc is not None and st.pid > 1 and supervise.exited(st.pid)

    def _stop_leftovers(self, how: str, sig: int) -> None:
        # The root has exited: how the run ended is settled (a crash stays a crash; a Ctrl-C pressed while memscope
        # waits on a leftover used to turn it into stopped_by_user). The stop only hurries the leftovers along.
        if self.state.ended.is_set():
            return
        self.publish(Event(self.elapsed(), None, "stop_after_end", {"how": how}))
        self.state.sup.signal_run(sig)

    def forward(self, sig: int) -> None:
        """Pass a signal memscope received on to the run, as a terminal would to its foreground group (SIGHUP),
        and to each member that left the group."""
        if self.state.ended.is_set():
            return
        self.publish(Event(self.elapsed(), None, "signal_forwarded", {"signal": signal_name(sig)}))
        self.state.sup.signal_run(sig)

    def pass_on(self, sig: int) -> bool:
        """A user signal (SIGUSR1, SIGUSR2) memscope received, passed on to the training's main process where it
        catches it (a checkpoint-on-signal handler); False, recorded, where it does not: the default action of a
        user signal ends a process, and memscope never ends the run for a signal meant for itself."""
        if self.state.ended.is_set():
            return False
        name = signal_name(sig)
        if self.state.sup.signal_if_caught(self.state.main_pid(), sig):
            self.publish(Event(self.elapsed(), None, "signal_forwarded", {"signal": name}))
            return True
        self.publish(Event(self.elapsed(), None, "signal_not_forwarded", {"signal": name, "why": "not caught"}))
        return False

    def suspend(self) -> None:
        """Ctrl-Z: stop every process of the run (SIGSTOP: the run's group is orphaned, so SIGTSTP could be
        discarded by the kernel)."""
        if not self.state.ended.is_set():
            self.publish(Event(self.elapsed(), None, "suspended", {}))
            self.state.sup.signal_run(signal.SIGSTOP)

    def resume(self) -> None:
        """fg / bg: continue every process of the run."""
        if not self.state.ended.is_set():
            self.state.sup.signal_run(signal.SIGCONT)
            self.publish(Event(self.elapsed(), None, "resumed", {}))

    def detach(self) -> None:
        """Stop watching (attach mode): the process goes on; the record ends here."""
        if self.state.ended.is_set() or self.state.detached:
            return
        self.publish(Event(self.elapsed(), None, "detached", {}))
        self.state.detached = True
        self.state.ended_early.set()

    def summary(self) -> Summary:
        """The summary: final once the run ended, else what the record says so far (exit cause "running")."""
        if self.state.summary is not None:
            return self.state.summary
        s = finish_mod.summarize_record(self.state)
        s["exit"] = finish_mod.exit_info(
            self.state, "running", f"The run is still going ({self.elapsed():.0f} s so far)."
        )
        return s

    def verdict(self) -> dict[str, Any]:
        """The live leak verdict and its kind of growth, as every view shows it (``session/verdict.py``): held
        against flip-flops, saying what it leans to while not yet sure. After the end, the summary's ``leak``."""
        leak = self.state.summary.get("leak") if self.state.summary is not None else None
        if isinstance(leak, dict):
            return dict(leak)
        return self.live_verdict.current()

    def limit(self) -> Limit | None:
        """The limit the run is compared against now, and its source ("flag", "cgroup" or "host"), as the summary's
        ``limit`` says it."""
        return self.state.limit()

    def scalene_snapshot(self, seconds: float = 10.0) -> "ScaleneSnapshot":
        """Profile the running script with Scalene for ``seconds`` and return that window's hot lines (``.top``)
        and the path of Scalene's full HTML report (``.html_path``); recorded as a "scalene_snapshot" event.

        Raises ScaleneError (one line) when the run is not under Scalene (``scalene=True``), has ended, or has
        no agent in the profiled process.
        """
        return scalene_mod.take_snapshot(self.state, self.scalene, seconds)

    def census(self, timeout: float = 30.0) -> "Census":
        """Take a tensor census in the main process: torch tensors by device, dtype and shape (count, bytes, how
        many hold a grad_fn), Python types, the largest containers, and the difference from the previous census.

        Raises CensusError (one line) when the run has no agent in its main process or does not answer.
        """
        return self.agents.census(timeout)

    def stacks(self, timeout: float = 1.0) -> "Stacks":
        """Every process's Python stacks now (every thread: file, line, function, source line), grouped by role,
        identical stacks collapsed; processes without memscope's agent named with their state. Works while the
        main thread is inside a long C call that holds the GIL (faulthandler dumps from a signal handler).
        Recorded with the run as a "stacks" event. ``timeout``: the whole tree's deadline.

        Raises StacksError (one line) when the run has ended or has no agent.
        """
        return self.stack_taker.take("request", deadline_s=timeout)

    def subscribe(self, fn: Callable[[Record], None], maxsize: int = 10000) -> Callable[[], None]:
        """Call ``fn(record)`` for every new record, on a thread of its own; returns an unsubscribe function.

        A slow subscriber never slows the collectors: past ``maxsize`` queued records, the oldest are dropped.
        """
        return self.state.subs.add(fn, maxsize)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything published so far is in the record file (False if the writer is still behind)."""
        return self.state.recorder.sync(timeout)

    def on_end(self, fn: Callable[["Run"], None]) -> None:
        """Call ``fn(run)`` once the run has ended (at once if it has)."""
        self.state.on_end.append(lambda: fn(self))
        if self.state.ended.is_set():
            fn(self)

    @property
    def output_partial(self) -> str:
        """The line being written (a progress bar), not yet ended by a newline."""
        return next((r.partial for r in self.state.readers.values() if r.partial), "")

    @property
    def exporter(self) -> Any:
        """The Prometheus exporter attached to this run (``prometheus=`` / ``pushgateway=``), else None."""
        return getattr(self.attachments.get("prometheus"), "exporter", None)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any] | None:
        """In a notebook (``run`` as a cell's last line, ``display(run)``): the run's live dashboard, drawn by the
        view the package registered (``wiring``); None where widgets cannot render, and the repr is shown."""
        return wiring.mimebundle_of(self)

    def __repr__(self) -> str:
        cause = f" {self.exit['cause']}" if self.exit else ""
        return f"<memscope.Run {self.run_id} pid={self.pid} {self.status}{cause}>"

    # -- for the attachments and the tests -------------------------------------------------------------------
    def publish(self, rec: Record) -> None:
        """Record ``rec``, fold it into the snapshot, and pass it to every subscriber."""
        self.state.publish(rec)

    def main_pid(self) -> int:
        """The live main process (its role says so), else the root."""
        return self.state.main_pid()

    @property
    def _server(self) -> "AgentServer | None":  # the agents' socket (tests reach into it)
        return self.agents.server

    @property
    def _token(self) -> str:
        return self.agents.token

    def _root_gone(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state.returncode is not None or self.state.ended.is_set():
                return True
            time.sleep(0.05)
        return False
