# Run inside a PID namespace (unshare --pid --fork): forks two children; every pid it sees is a namespace pid.
import os
import sys
import time

life = float(sys.argv[1]) if len(sys.argv) > 1 else 1.5
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        time.sleep(life)
        os._exit(0)
    kids.append(pid)
print("ns pids", os.getpid(), *kids, flush=True)
for pid in kids:
    os.waitpid(pid, 0)
print("done", flush=True)
