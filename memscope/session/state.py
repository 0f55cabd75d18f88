"""A run's shared state: what the parts of a session (launch, sampling, agents, stacks, Scalene, the end) read and
write, as public fields of one ``RunState``, with the few actions every part takes on it (publish, the clock).

The parts import this module, never ``run.py`` (which imports them): the state sits below them all, so the
import graph stays one way and every field has a type. ``Run`` is the public handle over one ``RunState``.
"""

from __future__ import annotations

import collections
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import supervise
from ..collect.host import KernelLog
from ..collect.output import LineReader
from ..collect.server import AgentServer
from ..collect.tree import TreeSampler
from ..fmt import signal_name
from ..model import Event, ExitInfo, Limit, Record, Summary
from ..record.writer import Recorder
from .live import Snapshot, Subscribers
from .options import Options

OUTPUT_TAIL_LINES = 200  # the live tail of the run's output that views show (the record keeps it all)


@dataclass(eq=False)
class RunState:
    """Everything a run's parts share. Fields marked "set at launch" do not exist before ``launch`` sets them."""

    options: Options
    say: Callable[[str], None]  # memscope's own lines about the run (stderr, or the notebook cell's view)
    command: list[str]
    script: str | None
    attached: bool
    record_dir: str
    run_id: str
    record_path: str
    output_files: tuple[str, str] | None = None  # capture mode: the run's stdout and stderr files
    recorder: Recorder = field(init=False)
    agent_dir: str = ""  # 0700: the agents' socket and crash files, the stacks' dumps and requests
    agent_server: AgentServer | None = None  # started with the run's environment (agents.Agents.environment)
    pid: int = 0
    status: str = "starting"
    returncode: int | None = None
    exit: ExitInfo | None = None
    summary: Summary | None = None  # final, once the run ended
    snapshot: Snapshot = field(default_factory=Snapshot)
    output_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=OUTPUT_TAIL_LINES))
    subs: Subscribers = field(default_factory=Subscribers)
    on_end: list[Callable[[], None]] = field(default_factory=list)  # called once, after "ended"
    ended: threading.Event = field(default_factory=threading.Event)
    ended_early: threading.Event = field(default_factory=threading.Event)  # detached: the waiter stops polling
    output_done: threading.Event = field(default_factory=threading.Event)  # the output readers read to the end
    output_stop: threading.Event = field(default_factory=threading.Event)  # they give up on the rest (counted)
    root_exited: threading.Event = field(default_factory=threading.Event)  # its status is known: a stop changes
    # no verdict
    stop_requested: str | None = None  # "stop", "terminate" or "kill", once asked
    stop_lock: threading.Lock = field(default_factory=threading.Lock)
    detached: bool = False
    subreaper: bool = False  # this process holds the subreaper role for the run (supervise.hold_subreaper)
    maxrss: int | None = None  # the root's peak RSS from wait4, when above the launcher's own
    launcher_peak: int | None = None  # this process's peak RSS at the launch (finish.wait_loop)
    kmsg: KernelLog | None = None  # the OOM killer's victims while the run goes
    readers: dict[str, LineReader] = field(default_factory=dict)  # stream name -> reader (capture mode)
    proc: subprocess.Popen[bytes] | None = None  # the root, when memscope launched it
    sup: supervise.Supervisor = field(init=False)  # a placeholder until launch makes the run's own
    tree: TreeSampler = field(init=False)  # set at launch
    started_at: str = field(init=False)  # set at launch
    threads: list[threading.Thread] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.sup = supervise.Supervisor(0, self.attached, dict, lambda: True)

    def elapsed(self) -> float:
        """Seconds since the run started, on the clock every record's ``t`` uses."""
        return time.monotonic() - self.t0

    def publish(self, rec: Record) -> None:
        """Record ``rec``, fold it into the snapshot, and pass it to every subscriber."""
        self.recorder.put(rec)
        self.snapshot.update(rec, self.pid)
        self.subs.put(rec)

    def main_pid(self) -> int:
        """The live main process (its role says so), else the root."""
        return self.snapshot.main_pid(self.pid)

    @property
    def is_ended(self) -> bool:
        """Whether the run has ended (its summary is final)."""
        return self.ended.is_set()

    def limit(self) -> Limit | None:
        """The limit the run is compared against now, and its source ("flag", "cgroup" or "host")."""
        h = self.snapshot.host
        if self.options.limit_bytes:
            return {"bytes": self.options.limit_bytes, "source": "flag"}
        if h is None:
            return None
        return {"bytes": h.limit, "source": "cgroup"} if h.limit else {"bytes": h.total, "source": "host"}

    def spawn(self, target: Callable[[], None], name: str) -> None:
        """Start a daemon thread of the run (the end joins the ones it waits on, by name)."""
        th = threading.Thread(target=target, name=name, daemon=True)
        th.start()
        self.threads.append(th)

    def signal_sent(self, sig: int, pids: list[int], to: str = "tree") -> None:
        """What was really sent, for the verdict's words (SIGINT alone often ends a run)."""
        self.publish(
            Event(self.elapsed(), None, "signal_sent", {"signal": signal_name(sig), "to": to, "pids": list(pids)})
        )

    def record_trouble(self, line: str) -> None:
        """The recorder's one warning (a full disk): said on stderr, and to the live views as an event."""
        self.say(line)
        try:
            self.publish(Event(self.elapsed(), None, "record_error", {"error": line}))
        except Exception:
            pass
