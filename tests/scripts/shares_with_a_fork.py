"""Fills 200 MiB, forks a child that shares it and sleeps, prints the child's pid, reaps it when it dies, sleeps."""
import os
import sys
import time

buf = bytearray(b"x") * (200 << 20)  # written, so resident
pid = os.fork()
if pid == 0:
    time.sleep(120)
    os._exit(0)
print(pid, flush=True)
os.waitpid(pid, 0)
print("reaped", flush=True)
time.sleep(120)
