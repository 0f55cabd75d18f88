# Two children that must never get the stacks signal: a Python fork that said hello and then exec'd /bin/sleep
# (same pid, same start time, no handler any more), and a plain non-Python sleep.
import os
import subprocess
import time

child = os.fork()
if child == 0:
    time.sleep(1.0)  # its agent says hello (after fork) meanwhile
    os.execv("/bin/sleep", ["sleep", "60"])
plain = subprocess.Popen(["sleep", "60"])
print("ready %d %d" % (child, plain.pid), flush=True)
time.sleep(60)
