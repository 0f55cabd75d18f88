"""Fills 200 MiB and forks a child that shares it and sleeps (with --on-cue, once a line comes on stdin); prints
the child's pid, reaps it when it dies, prints "reaped" and sleeps."""
import os
import sys
import time

buf = bytearray(b"x") * (200 << 20)  # written, so resident
if "--on-cue" in sys.argv:
    print("ready", flush=True)
    sys.stdin.readline()
pid = os.fork()
if pid == 0:
    time.sleep(120)
    os._exit(0)
print(pid, flush=True)
os.waitpid(pid, 0)
print("reaped", flush=True)
time.sleep(120)
