"""DataLoader copy-on-read (pytorch/pytorch#13246): forked workers read a Dataset that holds its samples as a list of
small dicts; every read writes the objects' reference counts, so each worker copies the pages it reads from the
main, while its RSS stays flat. ``numpy`` holds the same data in arrays (no per-item object: no copy).

argv: dicts|numpy, items (default 600000), workers (default 3), epochs (default 1), seconds per epoch at least
(default 0: as fast as it goes).
"""

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Annotations(Dataset):
    """Samples as a list of dicts, the way a JSON annotation file is usually loaded."""

    def __init__(self, n):
        self.root = "/data/images"
        self.annotations = [
            {"id": i, "label": i % 10, "weight": float(i), "file": f"img_{i:07d}.jpg"} for i in range(n)
        ]

    def __len__(self):
        return len(self.annotations)

    def __getitem__(self, i):
        a = self.annotations[i]
        return torch.tensor([a["label"], a["weight"]])


class Arrays(Dataset):
    """The same samples in numpy arrays: reading an item writes no reference count in the arrays' pages."""

    def __init__(self, n):
        self.root = "/data/images"
        self.labels = np.arange(n, dtype=np.int64) % 10
        self.weights = np.arange(n, dtype=np.float64)
        self.files = np.array([f"img_{i:07d}.jpg" for i in range(n)], dtype="S16")

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.tensor([float(self.labels[i]), self.weights[i]])


if __name__ == "__main__":
    kind = sys.argv[1] if len(sys.argv) > 1 else "dicts"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 600_000
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    min_epoch_s = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    ds = Annotations(n) if kind == "dicts" else Arrays(n)
    print("dataset ready", len(ds), flush=True)
    fork = {"multiprocessing_context": "fork"} if workers else {}  # forked workers, as on Linux by default
    loader = DataLoader(ds, batch_size=512, shuffle=True, num_workers=workers, **fork)
    batches = len(loader)
    for epoch in range(epochs):
        t0, total = time.monotonic(), 0.0
        for k, batch in enumerate(loader):
            total += float(batch[:, 1].sum())
            # Spread the epoch over min_epoch_s: the main waits as a training step would.
            wait = t0 + min_epoch_s * (k + 1) / batches - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        print(f"epoch {epoch} done in {time.monotonic() - t0:.1f} s, sum {total:.0f}", flush=True)
    print("finished", flush=True)
