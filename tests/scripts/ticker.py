# Writes a growing counter to argv[1] every 20 ms (and its pid to argv[1].pid) for argv[2] seconds; ignores
# SIGHUP if argv[3] == "ignore-hup".
import os
import signal
import sys
import time

path, seconds = sys.argv[1], float(sys.argv[2])
if len(sys.argv) > 3 and sys.argv[3] == "ignore-hup":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
with open(path + ".pid", "w") as f:
    f.write(str(os.getpid()))
t0, n = time.monotonic(), 0
while time.monotonic() - t0 < seconds:
    n += 1
    with open(path, "w") as f:
        f.write(str(n))
    time.sleep(0.02)
print("ticked", n, flush=True)
