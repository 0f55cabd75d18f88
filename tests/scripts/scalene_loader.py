# A training loop whose batches come from 2 DataLoader workers; it ends (status 0) once the file argv[1] exists.
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Noise(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        return torch.randn(256)


stop = sys.argv[1]
model = torch.nn.Linear(256, 256)
loader = DataLoader(Noise(), batch_size=64, num_workers=2, persistent_workers=True)
for step, xb in enumerate(loader):
    model(xb).square().mean().backward()  # HOT
    if step == 0:
        print("training", flush=True)
    if os.path.exists(stop):
        break
print("finished", flush=True)
