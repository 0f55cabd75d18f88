# A training that saves a checkpoint when asked with SIGUSR1 (Slurm's --signal=USR1@60, a person's kill -USR1), or,
# with "plain" as argv[1], one that never installed a handler for it. Prints "ready <pid>", trains ~4 s after the
# first signal (or 8 s in all), then prints how many SIGUSR1 it got and exits 0.
import signal
import sys
import time

got = []
if sys.argv[1:] != ["plain"]:
    signal.signal(signal.SIGUSR1, lambda *_: got.append(time.monotonic()))
print("ready", __import__("os").getpid(), flush=True)
end = time.monotonic() + 8.0
while time.monotonic() < end and not (got and time.monotonic() > got[0] + 4.0):
    time.sleep(0.05)
print("usr1", len(got), flush=True)
