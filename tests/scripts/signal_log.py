# A training memscope did not start: it writes down every catchable signal it gets, and goes on. argv: log path.
import os
import signal
import sys
import time

log = sys.argv[1]


def note(signum, frame):
    with open(log, "a") as f:
        f.write(signal.Signals(signum).name + "\n")


for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
    signal.signal(s, note)
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(0.05)
