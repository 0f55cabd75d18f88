# Prints "ready", waits until the file named by argv[1] exists (at most 30 s), then exits 0.
import os
import sys
import time

buf = bytearray(16 << 20)
print("ready", flush=True)
deadline = time.monotonic() + 30
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("done", flush=True)
