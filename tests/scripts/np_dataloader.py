"""Seed 002's pattern in DataLoader workers: the Dataset reads data['X_train'][i] per item from an NpzFile, so
every item reads the whole member again, in two forked workers that leave by os._exit.

argv: a directory holding pairs.npz (X_train, Y_train)."""

import os
import sys

import numpy as np
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset):
    def __init__(self, path):
        self.path, self.data = path, None

    def __len__(self):
        return 12

    def __getitem__(self, i):
        if self.data is None:  # opened in the worker: an NpzFile opened before the fork shares its file offset
            self.data = np.load(self.path, mmap_mode="r")
        return self.data["X_train"][i]


n = sum(len(b) for b in DataLoader(Pairs(os.path.join(sys.argv[1], "pairs.npz")), batch_size=2, num_workers=2))
print("items", n, flush=True)
