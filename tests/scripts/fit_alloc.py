"""Holds N MiB (argv[1]) of touched memory for a moment, then ends: a probe whose peak is a line in N."""

import sys
import time

n = int(sys.argv[1])
hold = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
block = bytearray(n << 20)
for i in range(0, len(block), 4096):
    block[i] = 1  # resident, not only reserved
print("holding", n, "MiB", flush=True)
time.sleep(hold)
