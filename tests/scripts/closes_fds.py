# A program that closes every inherited descriptor (as daemonizers do: `low` closes 3..255, `all` up to the
# soft limit, as python-daemon does), then puts its own file and its own TCP connection on the numbers that were
# open before (the agent's), and trains. Whatever memscope does, the file must hold only what the program wrote
# and the peer receive only what the program sent. Exits 0 only then; prints what it found. `all-crash`: as
# `all`, then a segfault (faulthandler must dump elsewhere than into the program's file). `race`: a thread puts
# them on the agent's numbers (dup2) while the training runs. `fault-crash`: only faulthandler's number is taken
# (the agent's socket stays its own), then a segfault.
import json
import os
import resource
import socket
import stat
import sys
import tempfile
import time

import torch
from torch import nn

import memscope

mode = sys.argv[1]
model = nn.Linear(8, 8)
model.train()
model.eval()  # the agent has spoken: its descriptors are open
held = {}
for name in os.listdir("/proc/self/fd"):
    n = int(name)
    try:
        if n > 2:
            held[n] = stat.S_ISSOCK(os.fstat(n).st_mode)
    except OSError:
        pass  # the listing's own descriptor

if mode in ("low", "all", "all-crash"):
    os.closerange(3, 256 if mode == "low" else resource.getrlimit(resource.RLIMIT_NOFILE)[0])

server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname())
peer, _ = server.accept()
fd, path = tempfile.mkstemp()
placed = []


def place(n, is_sock):
    try:
        os.dup2(client.fileno() if is_sock else fd, n)  # the program's own objects on the agent's old numbers
    except OSError:
        return  # a number the program cannot be handed (at or above its descriptor limit)
    placed.append(n)


if mode == "race":  # another thread puts them there while the training runs, whatever the agent is doing
    import threading

    def racer():
        for _ in range(200):
            for n, is_sock in sorted(held.items()):
                if n not in placed:
                    place(n, is_sock)
            time.sleep(0.001)

    threading.Thread(target=racer, daemon=True).start()
for n, is_sock in sorted(held.items()):
    if mode == "race" or mode == "fault-crash" and "/memscope-" not in os.readlink("/proc/self/fd/%d" % n):
        continue  # fault-crash: faulthandler's number alone is taken; the agent's socket stays its own
    try:
        os.fstat(n)
        if mode != "fault-crash":
            continue  # still open: not closed by the program, nothing to put there
    except OSError:
        pass
    place(n, is_sock)

os.write(fd, b"program data\n")
client.sendall(b"ping\n")
for _ in range(3):
    model.train()
    model(torch.randn(4, 8)).sum().backward()
    model.eval()
    with memscope.phase("after_close"):
        time.sleep(0.1)
    memscope.mark("after close")
time.sleep(2.5)  # the heap probe's periodic report (every 2 s) goes out too
os.write(fd, b"end\n")
if mode.endswith("crash"):  # a segfault now: faulthandler's dump must not land in the program's file
    import faulthandler

    print(json.dumps({"path": path, "placed": placed}), flush=True)
    faulthandler._sigsegv()

with open(path, "rb") as f:
    content = f.read()
peer.settimeout(1.0)
got = b""
try:
    while len(got) < 1 << 16:
        chunk = peer.recv(65536)
        if not chunk:
            break
        got += chunk
except socket.timeout:
    pass
for n in placed:
    os.close(n)
os.unlink(path)
ok = content == b"program data\nend\n" and got == b"ping\n"
print(
    json.dumps(
        {
            "held": sorted(held),
            "placed": placed,
            "file": content.decode("utf-8", "replace")[:300],
            "peer": got.decode("utf-8", "replace")[:300],
            "ok": ok,
        }
    ),
    flush=True,
)
sys.exit(0 if ok else 3)
