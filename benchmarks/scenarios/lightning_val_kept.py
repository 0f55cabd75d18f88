"""Lightning 2.x: a tiny model (synthetic data, 2 persistent DataLoader workers for training and 2 for
validation) whose validation_step appends its outputs, 1 MiB of features a batch, to a list that is never cleared:
seed 001's list of predictions. Validation every epoch (~2-3 s): +10 MiB per validation."""

TRUTH = {"verdict": "leak", "growth": "leak", "per_step_mib": 10, "seconds": 60}

import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import lightning as L  # noqa: E402
import torch  # noqa: E402
from _common import Clock, quiet_lightning_trainer, seconds, truth  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


class Tiny(L.LightningModule):
    def __init__(self, keep: bool) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8192))  # 32 x 8192 floats: 1 MiB
        self.head = nn.Linear(8192, 2)
        self.keep, self.validations = keep, 0
        self.outputs: list[torch.Tensor] = []

    def training_step(self, batch: Any, _: int) -> torch.Tensor:
        x, y = batch
        time.sleep(0.015)  # a step that takes a moment, like a real one
        return nn.functional.cross_entropy(self.head(self.body(x)), y)

    def validation_step(self, batch: Any, _: int) -> torch.Tensor:
        x, y = batch
        feats = self.body(x)
        if self.keep:
            self.outputs.append(feats)  # the leak: every validation's outputs, never cleared
        time.sleep(0.02)
        return nn.functional.cross_entropy(self.head(feats), y)

    def on_validation_epoch_end(self) -> None:
        self.validations += 1
        print(f"validation {self.validations} done, {len(self.outputs)} outputs kept", flush=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Deadline(L.Callback):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
        if not self.clock.running():
            trainer.should_stop = True


def main(keep: bool) -> None:
    torch.manual_seed(0)
    x = torch.randn(1600, 64)
    y = (x[:, 0] > 0).long()
    train = DataLoader(TensorDataset(x, y), batch_size=32, num_workers=2, persistent_workers=True)
    val = DataLoader(TensorDataset(x[:320], y[:320]), batch_size=32, num_workers=2, persistent_workers=True)
    model = Tiny(keep)
    clock = Clock(seconds(TRUTH["seconds"]))
    trainer = quiet_lightning_trainer([Deadline(clock)])
    trainer.fit(model, train, val)
    kept = sum(t.numel() * t.element_size() for t in model.outputs)
    truth(kept_bytes=kept, validations=model.validations, per_step_bytes=kept / max(1, model.validations))


if __name__ == "__main__":
    main("--no-leak" not in sys.argv)
