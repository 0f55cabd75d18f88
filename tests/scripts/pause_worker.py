# A worker that waits in signal.pause() for its parent's SIGUSR1 (and takes a return from pause() as that signal, as
# such workers do). argv: seconds until the parent sends it.
import os
import signal
import sys
import time

wake_at = float(sys.argv[1])
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    signal.pause()
    print(f"worker woke at {time.monotonic() - t0:.1f} s, SIGUSR1: {'yes' if got else 'no'}", flush=True)
    os._exit(0)
print("ready", os.getpid(), pid, flush=True)
time.sleep(wake_at)
os.kill(pid, signal.SIGUSR1)
os.waitpid(pid, 0)
