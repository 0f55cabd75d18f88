# A root that segfaults and leaves behind a child that ignores SIGTERM: memscope waits on the child (a moment,
# SIGTERM, another moment, SIGKILL) after the root is gone, the time in which a person presses Ctrl-C.
import ctypes
import os
import signal
import time

child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        time.sleep(0.1)
print("ready", os.getpid(), child, flush=True)
time.sleep(0.5)
ctypes.string_at(0)  # a NULL read in native code: SIGSEGV
