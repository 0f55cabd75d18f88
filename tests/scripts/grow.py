# A training-shaped run for the browser test: memory grows by 2 MiB every 0.1 s, with a progress line.
import sys
import time

kept = []
for step in range(1200):
    kept.append(bytearray(2 << 20))
    sys.stdout.write(f"\rstep {step + 1}/1200")
    sys.stdout.flush()
    time.sleep(0.1)
print()
