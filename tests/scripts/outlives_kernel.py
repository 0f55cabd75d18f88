# A training that prints every 0.25 s for argv[2] seconds, then writes "finished" to argv[1]: its kernel is
# killed half-way, and it must go on printing.
import sys
import time

path, seconds = sys.argv[1], float(sys.argv[2])
t0, n = time.monotonic(), 0
while time.monotonic() - t0 < seconds:
    print("step", n, flush=True)
    n += 1
    time.sleep(0.25)
with open(path, "w") as f:
    f.write("finished")
print("done", n, flush=True)
