# 127 Python processes alive at once: the root forks 126 children that live argv[1] seconds.
import os
import sys
import time

life = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
kids = []
for _ in range(126):
    pid = os.fork()
    if pid == 0:
        time.sleep(life)
        os._exit(0)
    kids.append(pid)
print("forked", len(kids), time.time(), flush=True)
for pid in kids:
    os.waitpid(pid, 0)
print("all done", time.time(), flush=True)
