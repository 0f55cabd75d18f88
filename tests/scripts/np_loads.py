"""NumPy loads the probe must describe (the data is written by the test beforehand, so this process's heap
starts clean): an .npz opened with mmap_mode='r' (NumPy ignores it) whose member is read three times, a
compressed .npz, a .npy memmapped then touched, a plain .npy, 40 small .npy files, and two errors of the user's.

argv: the data directory."""

import os
import sys
import time

import numpy as np

d = sys.argv[1]
data = np.load(os.path.join(d, "pairs.npz"), mmap_mode="r")
for i in range(3):
    row = data["X_train"][i]  # the pattern from seed 002: each access reads the whole member again
y = data.f.Y_train  # attribute access goes through the same reads
with np.load(os.path.join(d, "packed.npz")) as packed:
    x = packed["X_train"]

bank = np.load(os.path.join(d, "bank.npy"), mmap_mode="r")
print("bank type", type(bank).__name__, flush=True)
total = float(bank.sum())  # touch every page of the mapping: file-backed RSS, not anonymous
plain = np.load(os.path.join(d, "plain.npy"))
small = [np.load(os.path.join(d, "small", f"{i}.npy")) for i in range(40)]

try:
    np.load(os.path.join(d, "missing.npy"))
except FileNotFoundError as exc:
    print("user error:", type(exc).__name__, exc.filename, flush=True)
try:
    np.load(os.path.join(d, "bank.npy"), mmap_mode="bogus")
except ValueError as exc:
    print("user error:", type(exc).__name__, str(exc), flush=True)

time.sleep(2.5)  # the probes' thread reads the memmap's residency meanwhile
print("done", total > 0, len(small), flush=True)
