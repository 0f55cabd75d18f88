"""The agents' meeting point: a Unix socket in a private directory, one JSON line per message.

A connection must open with a hello carrying the run's token, or it is dropped (run as root, memscope lets
any user connect, for a run that switches user: the token is the key). The peer is who the kernel says
it is (SO_PEERCRED: its pid in memscope's PID namespace), never the pid its hello claims. The server runs on its own
thread and never writes back on its own (only a request such as a census, through ``request``), so a slow or dead
agent cannot stall the collectors.

Untrusted until the hello: each such connection is dropped ``HELLO_TIMEOUT_S`` after it opened, and a line
that is not a JSON object closes it. Their number has no small fixed cap (a same-user process holding a few dozen
silent connections must not lock the run's agents out): they are bounded by the descriptors memscope can spare,
and when those run out the oldest silent connection makes room for the new one; their buffered bytes are bounded
together (``PENDING_BYTES``). After the hello every message is checked
against ``messages.KINDS``: a refused one is counted and skipped, never passed on.

Each authenticated connection has a budget (token buckets): ``MSG_RATE`` messages and ``BYTE_RATE`` bytes a
second (after bursts of ``MSG_BURST`` and ``BYTE_BURST``), of which ``CHATTY_RATE`` phases and marks. A line over
the budget is counted (``over_budget``) and skipped before it is even parsed, so a flood costs memscope little and
grows neither its memory nor the record. The agent keeps far below it (agent/phases.py); only a process writing
to the socket itself reaches it.
"""

from __future__ import annotations

import errno
import hmac
import json
import os
import resource
import selectors
import socket
import struct
import sys
import threading
import time
from typing import Any, Callable

from ..agent.protocol import MAX_LINE
from .messages import Refused, parse_line, validate

OnMessage = Callable[[int, dict[str, Any]], None]
PENDING_BYTES = 64 << 20  # bytes buffered for connections without a valid hello yet, all together
PENDING_FREE_BYTES = 16 << 10  # what one such connection may buffer before the total is checked
HELLO_TIMEOUT_S = 2.0  # an agent says hello at once; a silent connection is not one
FD_RESERVE = 24  # descriptors kept free for /proc reads and the record: agents wait in the backlog instead
ACCEPT_BACKOFF_S = (0.05, 2.0)
MSG_RATE, MSG_BURST = 2000.0, 20000.0  # messages a second per connection, and at once
BYTE_RATE, BYTE_BURST = float(8 << 20), float(64 << 20)  # bytes a second per connection, and at once
CHATTY_RATE, CHATTY_BURST = 200.0, 2000.0  # of which phases and marks (the agent sends at most 100 a second)
CHATTY = ("phase", "mark")
BUDGET_TEXT = f"{MSG_RATE:g} messages and {BYTE_RATE / 2**20:g} MiB a second, {CHATTY_RATE:g} phases and marks"


class Bucket:
    """A token bucket: ``rate`` a second, at most ``burst`` at once."""

    __slots__ = ("rate", "burst", "tokens", "at")

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, time.monotonic()

    def take(self, n: float, now: float) -> bool:
        """Take ``n`` if there are that many; False (nothing taken) if not."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < n:
            return False
        self.tokens -= n
        return True


def peer_pid(conn: socket.socket) -> int | None:
    """The connecting process's pid as the kernel recorded it at connect(); None where there is no SO_PEERCRED,
    0 when the peer is in a PID namespace that has no name for it here."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        pid, _uid, _gid = struct.unpack(
            "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
    except OSError:
        return None
    return int(pid)


def _fd_limit() -> int:
    try:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 1 << 20


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


class AgentServer:
    """The agents' Unix socket: authenticates each connection, checks each message, passes it on."""

    def __init__(self, path: str, token: str, on_message: OnMessage, public: bool = False) -> None:
        """``public``: any user may connect (the token is still the key), for a run that switches user."""
        self.path = path
        self._token = token
        self._on_message = on_message
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        os.chmod(path, 0o666 if public else 0o600)
        self._listener.listen(128)
        self._listener.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name="memscope-agent-server", daemon=True)
        self.connections = 0
        self.rejected = 0  # connections closed: no valid hello, garbage, too many waiting, timed out
        self.refused = 0  # messages refused after the hello (unknown kind, bad fields)
        self.last_refusal: str | None = None
        self.over_budget = 0  # messages over a connection's budget, dropped unread
        self.over_budget_pid: int | None = None  # the first process that went over it
        self._pending: dict[socket.socket, float] = {}  # unauthenticated connection -> when it opened
        self.accept_failures = 0
        self.throttled = 0  # times the connection cap was reached (agents then wait in the backlog)
        self._listening = True
        self._resume_at = 0.0
        self._backoff = ACCEPT_BACKOFF_S[0]
        self._max_conns = (
            max(4, _fd_limit() - FD_RESERVE - _open_fds()) if sys.platform.startswith("linux") else 1 << 20
        )
        self.max_connections = self._max_conns
        self._by_pid: dict[int, socket.socket] = {}

    def start(self) -> None:
        """Listen, on a daemon thread."""
        self._thread.start()

    def close(self) -> None:
        """Stop listening and close every connection."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake()
        self._thread.join(timeout=2)
        # Drain: messages sent just before the processes exited are still in the sockets.
        for _ in range(100):
            ready = [k for k, _ in self._sel.select(timeout=0) if isinstance(k.data, dict)]
            if not ready:
                break
            for key in ready:
                self._read(key)
        for key in list(self._sel.get_map().values()):
            try:
                key.fileobj.close()  # type: ignore[union-attr]
            except OSError:
                pass
        self._sel.close()
        self._listener.close()  # not in the selector while accepting is paused
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def _wake(self) -> None:
        # The loop sleeps in select() for up to 0.2 s, and the end of every run waits on its join: a connection
        # to our own socket makes the listener readable now. No descriptor is held for this between runs (a
        # wake-up pair would cost two, and a tree short of descriptors needs every one).
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.setblocking(False)
                s.connect(self.path)
        except OSError:
            pass  # accepting paused, backlog full or no descriptor left: the loop's short timeout ends it anyway

    def request(self, pid: int, msg: dict[str, Any], timeout: float = 1.0) -> bool:
        """Send one request line to the agent of ``pid``; False if it has no live connection or no room."""
        conn = self._by_pid.get(pid)
        if conn is None or self._stop.is_set():
            return False
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        deadline = time.monotonic() + timeout
        try:
            while data:
                try:
                    data = data[conn.send(data) :]
                except (BlockingIOError, InterruptedError):
                    if time.monotonic() > deadline:
                        return False
                    time.sleep(0.01)
        except OSError:
            return False
        return True

    def stats(self) -> dict[str, Any]:
        """Counts of refused messages and rejected connections, and the last refusal."""
        return {
            "connections": self.connections,
            "rejected_connections": self.rejected,
            "refused_messages": self.refused,
            "last_refusal": self.last_refusal,
            "over_budget_messages": self.over_budget,
            "over_budget_pid": self.over_budget_pid,
        }

    def _loop(self) -> None:
        while not self._stop.is_set():
            if (
                not self._listening
                and time.monotonic() >= self._resume_at
                and len(self._sel.get_map()) <= self._max_conns
            ):
                self._sel.register(self._listener, selectors.EVENT_READ, None)
                self._listening = True
            for key, _ in self._sel.select(timeout=0.2 if self._listening else 0.05):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key)
            self._expire()

    def _pause_accepting(self, backoff: float) -> None:
        # A listener left registered while accept() cannot succeed makes select() return at once, forever.
        if self._listening:
            self._sel.unregister(self._listener)
            self._listening = False
        self._resume_at = time.monotonic() + backoff

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                self.accept_failures += 1
                self._pause_accepting(self._backoff)
                self._backoff = min(ACCEPT_BACKOFF_S[1], self._backoff * 2)
            return
        self._backoff = ACCEPT_BACKOFF_S[0]
        pid = peer_pid(conn)
        # A peer the kernel cannot name in our PID namespace (it cannot be told apart from another): refuse.
        if pid == 0:
            self.rejected += 1
            conn.close()
            return
        conn.setblocking(False)
        self._pending[conn] = time.monotonic()
        self._sel.register(
            conn,
            selectors.EVENT_READ,
            {
                "buf": b"",
                "pid": None,
                "peer": pid,
                "msgs": Bucket(MSG_RATE, MSG_BURST),
                "bytes": Bucket(BYTE_RATE, BYTE_BURST),
                "chatty": Bucket(CHATTY_RATE, CHATTY_BURST),
            },
        )
        if len(self._sel.get_map()) > self._max_conns:
            # Out of descriptors: a connection still silent makes room (the oldest: an agent says hello at once),
            # so silent ones can never lock out the agents; only authenticated ones make the others wait.
            oldest = next((c for c in self._pending if c is not conn), None)
            if oldest is not None:
                self.rejected += 1
                self._drop(oldest)
            else:
                self.throttled += 1
                self._pause_accepting(0.2)  # the others wait in the backlog until a connection closes

    def _expire(self) -> None:
        now = time.monotonic()
        for conn, opened in list(self._pending.items()):
            if now - opened > HELLO_TIMEOUT_S:
                self.rejected += 1
                self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        self._pending.pop(conn, None)
        for pid, c in list(self._by_pid.items()):
            if c is conn:
                self._by_pid.pop(pid, None)
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def _over_budget(self, pid: int) -> None:
        self.over_budget += 1
        if self.over_budget_pid is None:
            self.over_budget_pid = pid

    def _read(self, key: selectors.SelectorKey) -> None:
        conn: socket.socket = key.fileobj  # type: ignore[assignment]
        state = key.data
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        state["buf"] += chunk
        if len(state["buf"]) > MAX_LINE and b"\n" not in state["buf"]:
            self._drop(conn)
            return
        if state["pid"] is None and len(state["buf"]) > PENDING_FREE_BYTES:
            # Before its hello a connection is a stranger: all of them together buffer at most PENDING_BYTES.
            if sum(len(self._sel.get_key(c).data["buf"]) for c in self._pending) > PENDING_BYTES:
                self.rejected += 1
                self._drop(conn)
                return
        *lines, state["buf"] = state["buf"].split(b"\n")
        now = time.monotonic()
        for line in lines:
            if state["pid"] is not None and not (state["msgs"].take(1, now) and state["bytes"].take(len(line), now)):
                self._over_budget(state["pid"])  # unread: a flood costs no parsing
                continue
            try:
                msg = parse_line(line)
            except Refused:
                if state["pid"] is None:
                    self.rejected += 1
                self._drop(conn)  # garbage: whatever is at the other end is not an agent
                return
            if state["pid"] is None:
                token = msg.pop("token", "")
                try:
                    ok = (
                        msg.get("t") == "hello"
                        and isinstance(token, str)
                        and hmac.compare_digest(token.encode("utf-8", "replace"), self._token.encode())
                        and validate(msg) is msg
                    )
                except Refused:
                    ok = False
                if not ok:
                    self.rejected += 1
                    self._drop(conn)
                    return
                self._pending.pop(conn, None)
                peer = state.get("peer")
                pid: int = peer if peer is not None else msg["pid"]
                state["pid"] = pid
                self._by_pid[pid] = conn
                self.connections += 1
            else:
                try:
                    validate(msg)
                    if msg.get("t") == "hello":
                        raise Refused("a second hello")
                except Refused as exc:
                    self.refused += 1
                    self.last_refusal = str(exc)
                    continue
                if msg.get("t") in CHATTY and not state["chatty"].take(1, now):
                    self._over_budget(state["pid"])
                    continue
            try:
                self._on_message(state["pid"], msg)
            except Exception:
                pass  # a bad message must not stop the server
