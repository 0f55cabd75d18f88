# Seed 000: a DataLoader worker segfaults; the main fails after it with a RuntimeError.
import ctypes
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Faces(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        if i == 150:
            ctypes.string_at(0)
        time.sleep(0.005)
        return torch.zeros(3, 16, 16)


for batch in DataLoader(Faces(), batch_size=8, num_workers=2):
    pass
