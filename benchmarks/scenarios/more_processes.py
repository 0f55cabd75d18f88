"""Plain torch, clean, with more processes at half time: the training's DataLoader keeps 2 persistent workers;
at 30 s a second dataset arrives with its own DataLoader (2 persistent workers, each holding 60 MiB of its own,
evaluated every few seconds from then on). No process's memory grows: the tree's floor rises once, only because
more processes are alive."""

TRUTH = {"verdict": "no_leak", "growth": "more_processes", "added_processes": 2, "seconds": 60}

import time  # noqa: E402

import torch  # noqa: E402
from _common import Clock, log, seconds, tiny_model, train_step, truth  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

held = None


def hold(_: int) -> None:
    global held
    held = torch.ones(60 << 18)  # 60 MiB, written: resident and the worker's own


if __name__ == "__main__":
    model, opt = tiny_model()
    x = torch.randn(2048, 64)
    y = (x[:, 0] > 0).long()
    train = DataLoader(TensorDataset(x, y), batch_size=64, num_workers=2, persistent_workers=True)
    clock = Clock(seconds(TRUTH["seconds"]))
    second, at = None, None
    while clock.running():
        for xb, _ in train:
            loss = train_step(model, opt)
            time.sleep(0.1)
            log(clock, loss)
            if not clock.running():
                break
        if second is None and clock.now() >= clock.total / 2:
            second = DataLoader(
                TensorDataset(x[:256], y[:256]),
                batch_size=64,
                num_workers=2,
                persistent_workers=True,
                worker_init_fn=hold,
            )
            at = clock.now()
        if second is not None:
            with torch.no_grad():
                for xb, _ in second:
                    model(xb)
    truth(second_loader_at_s=at or -1)
