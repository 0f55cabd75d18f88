"""Lightning 2.x, a LightningModule that memoizes an expensive per-sample feature (a 64 KiB tensor a sample) in a
dict keyed by the sample's index. The first pass over the 3,200 samples fills it (~200 MiB over the first ~27 s);
every later epoch hits it: a cache that warms, then holds. No leak: a one-time rise (the growth kind ``step``).

Held out at first (written after the verdict was tuned on benchmarks/scenarios/). c4dfff8 called it "the floor
is flat" in 6 of 6 runs, and 37b103f was made on that: in-sample for that change."""

TRUTH = {"verdict": "no_leak", "growth": "step", "cache_mib": 200, "seconds": 80}

import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios"))

import lightning as L  # noqa: E402
import torch  # noqa: E402
from _common import Clock, quiet_lightning_trainer, seconds, truth  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

N = 3200


class Memo(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2))
        self.cache: dict[int, torch.Tensor] = {}
        self.filled_at: float | None = None

    def feature(self, i: int, x: torch.Tensor) -> torch.Tensor:
        if i not in self.cache:
            self.cache[i] = (x.repeat(256) * 0.5).clone()  # 64 x 256 floats: 64 KiB, "expensive"
        return self.cache[i][:64]

    def training_step(self, batch: Any, _: int) -> torch.Tensor:
        idx, x, y = batch
        feats = torch.stack([self.feature(int(i), xi) for i, xi in zip(idx, x)])
        time.sleep(0.2)  # the rest of a real step
        if self.filled_at is None and len(self.cache) == N:
            self.filled_at = CLOCK.now()
            print(f"cache full at {self.filled_at:.0f}s: {N} samples", flush=True)
        return nn.functional.cross_entropy(self.net(feats), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Deadline(L.Callback):
    def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
        if not CLOCK.running():
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        print(f"epoch done at {CLOCK.now():.0f}s, {len(module.cache)} cached", flush=True)


CLOCK = Clock(seconds(TRUTH["seconds"]))

if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(N, 64)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(torch.arange(N), x, y), batch_size=24, shuffle=True)
    model = Memo()
    trainer = quiet_lightning_trainer([Deadline()], limit_val_batches=0)
    trainer.fit(model, loader)
    kept = sum(t.numel() * t.element_size() for t in model.cache.values())
    truth(cache_bytes=kept, filled_at_s=model.filled_at or -1)
