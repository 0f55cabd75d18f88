"""The agent's line to the collector: JSON lines over a Unix socket that never blocks the training.

A message that cannot be sent at once is dropped whole (never cut: a line that the buffer took only in part is
finished first); if the collector is gone the channel goes quiet for good.
"""
import json
import socket
import threading


_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0) | getattr(socket, "MSG_DONTWAIT", 0)


class Channel:
    def __init__(self, path, token):
        self._path = path
        self._token = token
        self._sock = None
        self._dead = False
        self._lock = threading.Lock()
        self._pending = b""
        self.dropped = 0

    def connect(self, hello):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1.0)
            s.connect(self._path)
            s.setblocking(False)
            self._sock = s
        except OSError:
            self._dead = True
            return
        hello = dict(hello, t="hello", token=self._token)
        self.send(hello)

    def send(self, msg):
        if self._dead or self._sock is None:
            return False
        data = (json.dumps(msg, default=repr, separators=(",", ":")) + "\n").encode("utf-8", "replace")
        with self._lock:
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

    def _send_some(self, data):
        try:
            return self._sock.send(data, _FLAGS)
        except (BlockingIOError, InterruptedError):
            return 0

    def _close(self):
        self._dead = True
        try:
            self._sock.close()
        except OSError:
            pass

    def after_fork(self, hello):
        # The child shares the parent's socket: drop it without shutdown (that would cut the parent too).
        self._lock = threading.Lock()
        self._sock = None
        self._pending = b""
        self._dead = False
        self.connect(hello)
