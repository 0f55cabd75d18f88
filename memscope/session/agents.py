"""A run's agents: the socket server and the environment that leads each Python process of the run to it, the
messages they send, the census asked of the main process, and the crash files they leave behind.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

from ..agent import protocol
from ..collect.gpu import keep_snapshot
from ..collect.server import BUDGET_TEXT, AgentServer
from ..errors import CensusError
from ..model import Event
from .options import AGENT_SITE
from .sampling import Sampler
from .scalene import ScaleneSession
from .stacks import StackTaker
from .state import RunState

if TYPE_CHECKING:
    from ..analysis.census import Census

# Exceptions that end a process without it failing (a stop asked for, an exit asked for).
_NOT_FAILURES = ("KeyboardInterrupt", "SystemExit")


class Agents:
    """The agents' side of one run. ``dir`` (0700) holds the socket and the crash files until the run ends."""

    def __init__(
        self, run: RunState, scalene: ScaleneSession | None, stack_taker: StackTaker, sampler: Sampler
    ) -> None:
        self.run = run
        # The parts a hello concerns: the stacks' handlers, the cgroup the main process lives in, Scalene's pid.
        self.scalene, self.stack_taker, self.sampler = scalene, stack_taker, sampler
        self.token = secrets.token_hex(16)
        run.agent_dir = tempfile.mkdtemp(prefix="memscope-")  # 0700: socket and crash files
        self._census_waiting: dict[str, tuple[threading.Event, list[Any]]] = {}
        self._last_census: dict[str, Any] | None = None
        self._census_lock = threading.Lock()

    @property
    def dir(self) -> str:
        """The run's private directory (0700): the agents' socket, their crash files, the stacks' dumps."""
        return self.run.agent_dir

    @property
    def server(self) -> AgentServer | None:
        """The agents' socket server, once the run's environment is made (None: attached, or --no-agent)."""
        return self.run.agent_server

    def environment(self, env: dict[str, str]) -> None:
        """Start the server and point the run's environment at it (the agent's sitecustomize first on the path)."""
        run, o = self.run, self.run.options
        sock = os.path.join(self.dir, "agent.sock")
        # Run as root, the run may switch to a user no one can name in advance (runuser, su, gosu, a container's
        # entrypoint): its agents must still reach the socket. Any user may connect; none may list or write the
        # directory (its crash files stay memscope's); the run's token, in its environment only, is the key.
        public = hasattr(os, "geteuid") and os.geteuid() == 0
        if public:
            os.chmod(self.dir, 0o711)
        server = self.run.agent_server = AgentServer(sock, self.token, self.on_message, public=public)
        server.start()
        env.update({protocol.ENV_SOCK: sock, protocol.ENV_TOKEN: self.token, protocol.ENV_DIR: self.dir})
        if run.script:
            env[protocol.ENV_SCRIPT] = run.script
        if o.cuda_history:
            env["MEMSCOPE_CUDA_HISTORY"] = str(int(o.cuda_history))
        env["PYTHONPATH"] = os.pathsep.join([AGENT_SITE] + [p for p in [env.get("PYTHONPATH")] if p])

    def on_message(self, pid: int, msg: dict[str, Any]) -> None:
        """One message from an agent (``pid`` is the kernel's word for who sent it)."""
        run = self.run
        kind = str(msg.pop("t", "message"))
        t = run.elapsed()
        if kind == "hello":
            # ``pid`` is the kernel's (SO_PEERCRED); the one the message claims is only recorded: in a PID
            # namespace it is not a host pid, and a token holder could name any process.
            argv = msg.get("orig_argv") or msg.get("argv") or []
            ppid = msg.get("ppid")
            proof = run.tree.adopt(
                pid,
                ppid if isinstance(ppid, int) else 0,
                [str(a) for a in argv] if isinstance(argv, list) else [],
                bool(msg.get("runs_script")) and not msg.get("forked"),
            )
            if proof is None:
                run.publish(
                    Event(
                        t,
                        pid,
                        "agent_refused",
                        {
                            "claimed_pid": msg.get("pid"),
                            "reason": "not proven part of the run (not a descendant of "
                            "its root, not in its session, no marker in its environment)",
                        },
                    )
                )
                return
            run.publish(Event(t, pid, "agent_hello", dict(msg, membership=proof)))
            self.stack_taker.on_hello(pid, msg)
            if not msg.get("forked"):  # a Python main says hello at once: catch a move before it can be OOM-killed
                self.sampler.follow_cgroup()
        elif kind == "role":
            run.tree.hint_role(pid, str(msg.get("role")))
        elif kind == "exec":
            run.tree.note_exec(pid)
            run.publish(Event(t, pid, "agent_exec", msg))
        elif kind == "scalene":
            if self.scalene is not None:
                self.scalene.on_agent_message(pid, dict(msg))
            run.publish(Event(t, pid, "scalene", msg))
        elif kind == "mark":
            text = str(msg.get("text", ""))
            if len(text) > protocol.MARK_CHARS:  # whoever sent it: the record keeps a mark's first characters
                msg["text"] = text[: protocol.MARK_CHARS] + (
                    f" [memscope: cut; {len(text) - protocol.MARK_CHARS} more characters]"
                )
            run.publish(Event(t, pid, kind, msg))
        elif kind == "phase":
            msg["name"] = str(msg.get("name", ""))[: protocol.NAME_CHARS]
            ago = msg.pop("ago", None)
            if isinstance(ago, (int, float)) and ago > 0:  # an end the agent held back: dated when it happened
                t = max(0.0, t - min(float(ago), 60.0))
            run.publish(Event(t, pid, kind, msg))
        elif kind == "census":
            waiting = self._census_waiting.get(str(msg.pop("id", "")))
            if waiting is not None:  # recorded by census() itself, with its diff
                waiting[1].append((t, msg))
                waiting[0].set()
        else:
            if kind == "exception" and msg.get("type") not in _NOT_FAILURES:
                wall = msg.get("wall")
                run.tree.note_failure(pid, float(wall) if isinstance(wall, (int, float)) else time.time())
            elif kind in ("phase", "epoch"):
                run.tree.note_phase(pid)
            run.publish(Event(t, pid, f"agent_{kind}" if kind == "exception" else kind, msg))

    def census(self, timeout: float) -> "Census":
        """``Run.census``: ask the main process's agent for a census, diff it with the last one, record it."""
        from ..analysis.census import Census, advice, diff  # loaded while the run goes (finish.load_analyses)

        run = self.run
        with self._census_lock:  # one at a time: each diff is against the one before
            if run.is_ended:
                raise CensusError("the run has ended: a census needs the process alive")
            if self.server is None:
                raise CensusError("this run has no agent (attached, or started with --no-agent): no census")
            pid = run.main_pid()
            req = secrets.token_hex(4)
            done = threading.Event()
            box: list[tuple[float, dict[str, Any]]] = []
            self._census_waiting[req] = (done, box)
            try:
                if not self.server.request(pid, {"t": "census", "id": req}):
                    raise CensusError(
                        f"the main process (pid {pid}) has no memscope agent to ask "
                        "(not Python, or started with python -I)"
                    )
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
            run.publish(Event(t, pid, "census", data))
            return Census.from_dict(data)

    def close(self) -> None:
        """Stop the server; say in the record when it had to turn connections away."""
        if self.server is None:
            return
        self.server.close()
        if self.server.over_budget:
            self.run.publish(
                Event(
                    self.run.elapsed(),
                    None,
                    "collector_degraded",
                    {
                        "what": "agent_messages",
                        "over_budget": self.server.over_budget,
                        "pid": self.server.over_budget_pid,
                        "budget": BUDGET_TEXT,
                    },
                )
            )
        if self.server.throttled or self.server.accept_failures:
            self.run.publish(
                Event(
                    self.run.elapsed(),
                    None,
                    "collector_degraded",
                    {
                        "what": "agent_connections",
                        "max": self.server.max_connections,
                        "accept_failures": self.server.accept_failures,
                    },
                )
            )

    def collect_crash_files(self) -> None:
        """The faulthandler dumps, exceptions and CUDA snapshots the agents left in ``dir``, into the record."""
        run = self.run
        try:
            names = os.listdir(self.dir)
        except OSError:
            return
        for name in sorted(names):
            path = os.path.join(self.dir, name)
            try:
                if name.startswith(protocol.FAULT_PREFIX) and os.path.getsize(path) > 0:
                    pid = int(name[len(protocol.FAULT_PREFIX) :].split(".")[0])
                    with open(path, errors="replace") as f:
                        text = f.read(200000)
                    run.publish(Event(run.elapsed(), pid, "fault", {"text": text}))
                    run.tree.note_failure(pid, os.path.getmtime(path))  # written at the crash
                    if protocol.FAULT_ECHO + "." in name:
                        self._echo_stderr(text)
                elif name.startswith(protocol.EXC_PREFIX) and name.endswith(".json"):
                    pid = int(name[len(protocol.EXC_PREFIX) :].split(".")[0])
                    with open(path) as f:
                        exc = json.load(f)
                    run.publish(Event(run.elapsed(), pid, "exception", exc))
                    if isinstance(exc, dict) and exc.get("type") not in _NOT_FAILURES:
                        run.tree.note_failure(pid, os.path.getmtime(path))
                elif name.startswith("cuda_snapshot_") and name.endswith(".pickle"):
                    run.publish(
                        Event(
                            run.elapsed(),
                            None,
                            "cuda_snapshot",
                            {"name": name, "path": keep_snapshot(path, run.record_path)},
                        )
                    )
            except (OSError, ValueError):
                continue

    def _echo_stderr(self, text: str) -> None:
        """The user's own faulthandler output (PYTHONFAULTHANDLER=1), which the agent's file took: to the run's
        stderr, where the user asked for it."""
        run = self.run
        if run.options.output == "capture":
            run.publish(Event(run.elapsed(), run.pid, "output", {"stream": "stderr", "text": text}))
            run.output_tail.extend(text.rstrip("\n").split("\n"))
        else:
            run.say(text.rstrip("\n"))
