"""Plain torch, a 20 M-parameter MLP trained with AdamW and gradient accumulation (4 micro-batches), checkpointed
every 12 s with ``torch.save`` of the model's and the optimizer's state into an in-memory buffer that is then
dropped (an upload stand-in): a clean run whose memory spikes ~240 MiB at each checkpoint.

Held out, second round: written after 37b103f and never used to tune the verdict."""

TRUTH = {"verdict": "no_leak", "growth": "spikes", "seconds": 75}

import io  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios"))

import torch  # noqa: E402
from _common import Clock, log, seconds, truth  # noqa: E402
from torch import nn  # noqa: E402

if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    clock = Clock(seconds(TRUTH["seconds"]))
    next_ckpt, ckpts, biggest = 12.0, 0, 0
    while clock.running():
        opt.zero_grad()
        for _ in range(4):
            x = torch.randn(32, 1024)
            loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long()) / 4
            loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        time.sleep(0.1)
        log(clock, loss)
        if clock.now() >= next_ckpt:
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
            biggest = max(biggest, buf.tell())
            del buf
            ckpts += 1
            next_ckpt += 12.0
    truth(checkpoints=ckpts, checkpoint_bytes=biggest)
