# A main with a child that ignores SIGINT and SIGTERM, and a grandchild that leaves the session (setsid).
import os
import signal
import subprocess
import sys
import time

IGNORE = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(600)"
ESCAPE = "import time; time.sleep(600)"  # started in a session of its own, below
child = subprocess.Popen([sys.executable, "-c", IGNORE])
if os.fork() == 0:  # double fork: the grandchild is re-parented to init and leaves the session
    subprocess.Popen([sys.executable, "-c", ESCAPE], start_new_session=True)
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("tree ready", flush=True)
while True:
    time.sleep(0.1)
