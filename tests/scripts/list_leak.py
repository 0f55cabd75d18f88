"""Seed 001 at small scale, without torch: validation outputs appended to a list that is never cleared."""

import time

history = []
deadline = time.time() + 20
while time.time() < deadline:
    history.extend(float(i) for i in range(2000))  # "for the epoch-end metric"
    time.sleep(0.02)
