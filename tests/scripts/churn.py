# Forks argv[1] children a second for argv[2] seconds, each living argv[3] seconds (a busy pool, a shell loop).
import os
import sys
import time

rate, seconds, life = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
born, t0, kids = 0, time.monotonic(), set()
while time.monotonic() - t0 < seconds:
    due = int((time.monotonic() - t0) * rate)
    while born < due:
        pid = os.fork()
        if pid == 0:
            time.sleep(life)
            os._exit(0)
        kids.add(pid)
        born += 1
    while kids:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        kids.discard(pid)
    time.sleep(0.005)
for pid in kids:
    os.waitpid(pid, 0)
print("births", born, flush=True)
