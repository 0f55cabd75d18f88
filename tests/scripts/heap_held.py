"""glibc keeps freed memory: 120k malloc'd blocks of 1000 bytes, every other one freed, so that the free half
is scattered between live blocks and cannot go back to the kernel. Imports numpy (what attaches the probe)."""

import time

import numpy  # noqa: F401

blocks = [bytes(1000) + bytes([i % 256]) for i in range(120_000)]  # > 512 bytes: glibc, not pymalloc
time.sleep(2.5)
del blocks[::2]
time.sleep(2.5)
print("held", len(blocks), flush=True)
