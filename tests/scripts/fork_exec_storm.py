# A launcher's fork storm: Python children that exec /bin/sleep after a moment (what launchers and subprocess with
# preexec_fn do). Each fork says hello (the agent's at-fork hook) with its stacks handler; exec drops the handler.
# argv: seconds to run. Prints each child's end that was a signal, then "storm: K of N children killed".
import os
import random
import sys
import time

until = time.monotonic() + float(sys.argv[1])
live, n, killed = set(), 0, []
print("ready", os.getpid(), flush=True)
while time.monotonic() < until or live:
    while len(live) < 6 and time.monotonic() < until:
        pid = os.fork()
        if pid == 0:
            time.sleep(random.uniform(0.02, 0.3))  # long enough to be found and asked, then exec at any moment
            os.execv("/bin/sleep", ["sleep", "0.2"])
        live.add(pid)
        n += 1
    pid, status = os.wait()
    live.discard(pid)
    if os.WIFSIGNALED(status):
        killed.append(os.WTERMSIG(status))
        print("child", pid, "killed by signal", os.WTERMSIG(status), flush=True)
print(f"storm: {len(killed)} of {n} children killed", flush=True)
