# A tiny Lightning 2.x training (synthetic data, 2 DataLoader workers) with validation every epoch. With --leak,
# every validation step keeps its outputs (4 MiB a step, never freed: seed 001's list of predictions). Lightning
# restores train mode after validation by setting module.training directly: memscope must still see the switch.
# Prints VAL lines with the script's own validation time, the truth the test compares memscope's phases with.
# With --eval-loaders, the validation loader's workers are not persistent: 2 more workers start at every validation
# and exit at its end (the tree's process count goes 3, 5, 3, ...).
import sys
import time

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

leak = "--leak" in sys.argv
seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 25
eval_loaders = "--eval-loaders" in sys.argv


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 2))
        self.kept = []
        self.val_time = 0.0

    def training_step(self, batch, _):
        x, y = batch
        time.sleep(0.01)  # a step that takes a moment, like a real one
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        out = self.net(x)
        if leak:
            self.kept.append(torch.ones(1 << 20))  # 4 MiB kept per validation step
        time.sleep(0.02)
        return nn.functional.cross_entropy(out, y)

    def on_validation_start(self):
        self._v0 = time.monotonic()

    def on_validation_end(self):
        self.val_time += time.monotonic() - self._v0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Deadline(L.Callback):
    def __init__(self):
        self.end = time.monotonic() + seconds

    def on_train_batch_end(self, trainer, *_):
        if time.monotonic() > self.end:
            trainer.should_stop = True


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(640, 64)
    y = (x[:, 0] > 0).long()
    train = DataLoader(TensorDataset(x, y), batch_size=32, num_workers=2, persistent_workers=True)
    val = DataLoader(
        TensorDataset(x[:320], y[:320]), batch_size=32, num_workers=2, persistent_workers=not eval_loaders
    )
    model = Tiny()
    t0 = time.monotonic()
    trainer = L.Trainer(
        max_epochs=1000,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Deadline()],
    )
    trainer.fit(model, train, val)
    total = time.monotonic() - t0
    print(f"TRUTH fit_s={total:.2f} val_s={model.val_time:.2f} kept={len(model.kept)}", flush=True)
