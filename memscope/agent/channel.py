"""The agent's line to the collector: JSON lines over a Unix socket that never blocks the training.

A message that cannot be sent at once is dropped whole (never cut: a line that the buffer took only in part is
finished first); if the collector is gone the channel goes quiet for good.

The socket sits on a close-on-exec descriptor the program cannot be handed (``fds.lift``), and before each use
the channel checks that the number still names its socket: a program that closed it and was handed the number again keeps it untouched
(the channel goes quiet, letting go of the number without closing it).
"""
from __future__ import annotations

import json
import select
import socket
import threading
import time

from . import fds

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator

    from .fds import Ident
    from .protocol import Message

_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0) | getattr(socket, "MSG_DONTWAIT", 0)


class Channel:
    """The agent's one connection to memscope: JSON lines over a Unix socket, never blocking the user's code."""
    def __init__(self, path: str, token: str) -> None:
        self._path = path
        self._token = token
        self._sock: socket.socket | None = None
        self._ident: Ident | None = None  # (st_dev, st_ino, is a socket) of the connected socket's descriptor
        self._dead = False
        self._lock = threading.Lock()
        self._pending = b""
        self.dropped = 0
        # Called once the socket's number is found to be the program's (check the others).
        self.on_lost: Callable[[], object] | None = None
        # Called before every message, sent or not: the agent's other descriptors (faulthandler's, written from C
        # with no check at the crash) are checked as often as the program gives the agent control.
        self.on_use: Callable[[], object] | None = None

    def connect(self, hello: Message) -> None:
        """Connect and authenticate with the run's token; False when memscope cannot be reached."""
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1.0)
            s.connect(self._path)
            fd = fds.lift(s.detach())
            s = socket.socket(fileno=fd)
            s.setblocking(False)
            self._ident = fds.identity(fd)
            self._sock = s
        except OSError:
            self._dead = True
            return
        hello = dict(hello, t="hello", token=self._token)
        self.send(hello)

    def send(self, msg: Message) -> bool:
        """Send one message (a dict) without ever blocking the user's code; False when it could not go."""
        if self.on_use is not None:
            try:
                self.on_use()
            except Exception:
                pass
        if self._dead or self._sock is None:
            return False
        data = _encode(msg)
        with self._lock:
            if not self._mine():
                return False
            try:
                # Finish a line cut short by a full buffer first: lines must reach the collector whole.
                if self._pending:
                    self._pending = self._pending[self._send_some(self._pending):]
                    if self._pending:
                        self.dropped += 1
                        return False
                sent = self._send_some(data)
                if sent < len(data):
                    self._pending = data[sent:]
                return True
            except OSError:
                self._close()
        return False

    def send_now(self, msg: Message, timeout: float = 5.0) -> bool:
        """Send a reply whole, waiting up to ``timeout`` for room (only the agent's own reader thread calls
        this, never the training's threads)."""
        if self._dead or self._sock is None:
            return False
        data = _encode(msg)
        deadline = time.monotonic() + timeout
        with self._lock:
            if not self._mine():
                return False
            data, self._pending = self._pending + data, b""
            try:
                while data:
                    data = data[self._send_some(data):]
                    if data:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            self._pending = data  # finished by the next send, never cut
                            return False
                        _wait(self._sock, select.POLLOUT, min(left, 0.1))
                return True
            except OSError:
                self._close()
        return False

    def requests(self, idle: Callable[[], object] | None = None,
                 idle_s: float = 1.0) -> Iterator[dict[str, Any]]:
        """Yield the collector's requests (JSON lines) until the connection closes. Blocks: reader thread only.
        ``idle`` is called every ``idle_s`` seconds at most (the phases' held-back end)."""
        buf = b""
        while not self._dead and self._sock is not None:
            sock = self._sock
            try:
                ready = _wait(sock, select.POLLIN, idle_s)
                if idle is not None:
                    idle()
                if not ready:
                    continue
                with self._lock:  # never read from a number the program was handed since
                    if not self._mine():
                        return
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except (OSError, ValueError):
                return
            if not chunk:
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    yield msg

    def _send_some(self, data: bytes) -> int:
        sock = self._sock
        if sock is None:  # never: the callers checked it under the lock (and a missing socket is a lost one)
            raise OSError("memscope: no socket")
        try:
            return sock.send(data, _FLAGS)
        except (BlockingIOError, InterruptedError):
            return 0

    def _mine(self) -> bool:
        """True while the socket's descriptor is still the one the channel connected; else go quiet for good."""
        sock = self._sock
        if sock is None or self._dead:
            return False
        if fds.owns(sock.fileno(), self._ident):
            return True
        self._forget()
        return False

    def _forget(self) -> None:
        # The number now belongs to the program: let go of it without closing (detach), and never use it again.
        self._dead = True
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.detach()
            except OSError:
                pass
            if self.on_lost is not None:
                try:
                    self.on_lost()
                except Exception:
                    pass

    def _close(self) -> None:
        if self._sock is not None and fds.owns(self._sock.fileno(), self._ident):
            self._dead = True
            try:
                self._sock.close()
            except OSError:
                pass
        else:
            self._forget()

    def after_fork(self, hello: Message) -> None:
        """In a forked child: a connection of its own (the parent's socket is not shared)."""
        # The child shares the parent's socket: close its copy without shutdown (that would cut the parent too),
        # and only if the number is still ours (the program may have reused it before forking).
        self._lock = threading.Lock()
        old = self._sock
        if old is not None:
            if fds.owns(old.fileno(), self._ident):
                try:
                    old.close()
                except OSError:
                    pass
            else:
                old.detach()
        self._sock = None
        self._ident = None
        self._pending = b""
        self._dead = False
        self.connect(hello)


def _wait(sock: socket.socket, event: int, timeout: float) -> bool:
    """Whether ``sock`` is ready for ``event`` within ``timeout`` s. poll, not select: the agent's descriptors sit
    at or above the descriptor limit (fds.lift), past what select() takes."""
    p = select.poll()
    p.register(sock, event | select.POLLERR | select.POLLHUP)
    return bool(p.poll(timeout * 1000))


def _encode(msg: Message) -> bytes:
    return (json.dumps(msg, default=repr, separators=(",", ":")) + "\n").encode("utf-8", "replace")
