"""The agent's line to the collector: JSON lines over a Unix socket that never blocks the training.

A message that cannot be sent at once is dropped; if the collector is gone the channel goes quiet for good.
"""
import json
import socket
import threading


class Channel:
    def __init__(self, path, token):
        self._path = path
        self._token = token
        self._sock = None
        self._dead = False
        self._lock = threading.Lock()
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
                self._sock.sendall(data, socket.MSG_NOSIGNAL) if hasattr(socket, "MSG_NOSIGNAL") \
                    else self._sock.sendall(data)
                return True
            except (BlockingIOError, InterruptedError):
                self.dropped += 1
            except OSError:
                self._close()
        return False

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
        self._dead = False
        self.connect(hello)
