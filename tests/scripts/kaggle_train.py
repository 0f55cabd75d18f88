"""A tiny torch training as a Kaggle notebook would start one: DataLoader(num_workers=2), train and eval phases.
It prints which meta-path finders each process has, so the test sees Kaggle's sitecustomize ran in all of them."""

import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


def finders():
    return ",".join(sorted({type(f).__name__ for f in sys.meta_path}))


def worker_init(_):
    # One write(2) per line: two workers printing at once must not interleave within a line (print() may split it).
    os.write(1, f"WORKER FINDERS {finders()}\n".encode())


if __name__ == "__main__":
    print("MAIN FINDERS", finders(), "wrapt" in sys.modules, flush=True)
    data = TensorDataset(torch.randn(512, 16), torch.randn(512, 1))
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        model.train()
        for x, y in DataLoader(data, batch_size=32, num_workers=2, worker_init_fn=worker_init):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            loss = sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in DataLoader(data, batch_size=128))
        print("epoch", epoch, "eval loss", round(loss, 4), flush=True)
