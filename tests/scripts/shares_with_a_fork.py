"""Fills 200 MiB and forks a child that shares it and waits (with --on-cue, once a line comes on stdin); prints
the child's pid, reaps it when it dies, prints "reaped" and sleeps. The child exits when its parent does."""

import os
import sys
import time

buf = bytearray(b"x") * (200 << 20)  # written, so resident
if "--on-cue" in sys.argv:
    print("ready", flush=True)
    sys.stdin.readline()
parent = os.getpid()
pid = os.fork()
if pid == 0:  # gone with its parent, however the test ends: no orphan
    deadline = time.monotonic() + 120
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.1)
    os._exit(0)
print(pid, flush=True)
os.waitpid(pid, 0)
print("reaped", flush=True)
time.sleep(120)
