# A token holder inside the run that tries what the agent protocol must refuse: the recorder's own statements,
# a barrier with a pid too big for SQLite, a forged fault and exit status, garbage. Then it exits 0.
import json
import os
import socket
import sys
import time

sock_path, token = os.environ["MEMSCOPE_SOCK"], os.environ["MEMSCOPE_TOKEN"]


def conn(hello_pid=os.getpid()):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    send(s, {"t": "hello", "token": token, "pid": hello_pid, "ppid": os.getppid(), "argv": sys.argv})
    return s


def send(s, msg):
    s.sendall((json.dumps(msg) + "\n").encode())


s = conn()
forged = [
    {"t": "__sql__", "sql": "DROP TABLE samples", "args": []},
    {"t": "__barrier__", "event": None, "pid": 2**70},
    {"t": "fault", "text": "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n"},
    {"t": "exit_status", "returncode": -9, "stop_requested": None},
    {"t": "exception", "type": "ValueError", "traceback": "x", "pid": 2**70},  # pid out of range
    {"t": "mark", "text": "forged", "pid": -1},
    {"t": "mark", "text": ["not", "a", "string"]},
    {"t": "phase", "name": "x", "state": "nope", "auto": "yes"},  # a bool that is not one
    {"t": "np_load", "ev": "open", "id": "1", "path": "/x", "nbytes": 2**80},  # beyond any INTEGER
    {"t": "hello", "token": token, "pid": 1},  # a second hello
    # Schema-valid kinds whose fields have the wrong type (issue 22 #8): each once broke the whole summary.
    {"t": "malloc", "in_use_bytes": "lots", "free_held_bytes": 1},
    {"t": "np_read", "id": "1-1", "key": "x", "reads": 1, "path": "/d.npz", "duration_s": "slow"},
    {"t": "np_load", "ev": "open", "id": "1-2", "path": ["not", "a", "path"], "kind": "npy", "nbytes": 8},
    {"t": "faiss_index", "ev": "new", "id": "1-3", "type": "IndexFlatL2", "d": 8, "ntotal": 1, "est_bytes": "big"},
    {"t": "np_load", "ev": "open", "id": "1-4", "path": "/d.npz", "kind": "npz", "members": [["a", "8", 0]]},
    {"t": "malloc", "in_use_bytes": -5},  # out of bounds: a byte count is never negative
]
for msg in forged:
    send(s, msg)
send(s, {"t": "malloc", "in_use_bytes": 5 << 20, "free_held_bytes": 1 << 20, "arena_bytes": 6 << 20})  # well-typed
send(s, {"t": "mark", "text": "still heard"})  # a valid message after the refused ones still counts
s.sendall(b'{"t": "mark", "text": "nan", "wall": NaN}\n')  # not JSON: closes this connection
nan_closed = s.recv(1) == b""
time.sleep(0.3)

# A hello whose pid no process can have: refused, the connection closed.
bad = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
bad.connect(sock_path)
send(bad, {"t": "hello", "token": token, "pid": 2**70})
closed = bad.recv(1) == b""
# Garbage after a valid hello closes that connection.
g = conn()
g.sendall(b"this is not json\n")
g_closed = g.recv(1) == b""
print("forged sent", nan_closed, closed, g_closed, flush=True)
time.sleep(0.6)
