"""A program whose peak depends on glibc's dynamic mmap threshold: N (argv[1]) decides the sizes; ends by itself.

A 16 MiB block is malloc'd and freed first (mmapped, so freeing it raises the threshold to 16 MiB, as a freed
tensor does); then 4 blocks of N MiB are malloc'd, each followed by a 1 MiB block that stays (untouched) (so the freed ones
cannot merge into the heap's top and be trimmed), touched and freed; then one block of 4N MiB, touched and held.
With the dynamic threshold (N under 16) the 4 freed blocks came from the heap and stay resident: the peak is
about 8N MiB above the interpreter. With MALLOC_MMAP_THRESHOLD_=131072 they are mmapped and given back at free:
about 4N MiB. So a fixed threshold's probes are a line of 4 MiB per unit, and the program's own settings keep 4N
MiB more (the retention)."""

import ctypes
import sys
import time

MiB = 1 << 20
n = int(sys.argv[1])
hold = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.restype, libc.free.argtypes = None, [ctypes.c_void_p]


def block(size: int) -> int:
    p = libc.malloc(size)
    assert p, "malloc failed"
    ctypes.memset(p, 1, size)  # resident, not only reserved
    return p


libc.free(block(16 * MiB))
acts, pins = [], []
for _ in range(4):
    acts.append(block(n * MiB))
    pins.append(libc.malloc(MiB))  # 1 MiB: no hole already in the heap takes it, so it comes right after
for p in acts:
    libc.free(p)
grad = block(4 * n * MiB)
print("holding", n, flush=True)
time.sleep(hold)
libc.free(grad)
