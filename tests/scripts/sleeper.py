# Allocates, says it is ready, then waits to be killed from outside.
import os
import sys
import time

keep = bytearray(int(sys.argv[1]) << 20 if len(sys.argv) > 1 else 32 << 20)
for i in range(0, len(keep), 4096):
    keep[i] = 1
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(0.1)
