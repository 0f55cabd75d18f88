# A clean training whose tree holds more processes as it goes: every 4 s a new validation set arrives with its own
# DataLoader (2 persistent workers, each holding 12 MiB of its own), and every set is evaluated from then on. No
# process's memory grows: the tree's does, by 24 MiB a set, only because more workers are alive at once.
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 24


def hold(_):
    global held
    held = torch.ones(3 << 20)  # 12 MiB, written: resident and the worker's own


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(512, 32)
    y = (x[:, 0] > 0).long()
    model = torch.nn.Linear(32, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(TensorDataset(x, y), batch_size=32, num_workers=2, persistent_workers=True)
    loaders, t0, next_set = [], time.monotonic(), 0.0
    while time.monotonic() - t0 < seconds:
        model.train()
        for xb, yb in train:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            time.sleep(0.01)
        if time.monotonic() - t0 >= next_set:
            loaders.append(DataLoader(TensorDataset(x[:64], y[:64]), batch_size=32, num_workers=2,
                                      persistent_workers=True, worker_init_fn=hold))
            next_set += 4.0
        model.eval()
        with torch.no_grad():
            for loader in loaders:
                for xb, _ in loader:
                    model(xb)
    print(f"TRUTH sets={len(loaders)}", flush=True)
