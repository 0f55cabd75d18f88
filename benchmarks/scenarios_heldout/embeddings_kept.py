"""Plain torch, a retrieval-style training that collects every step's embeddings "for the epoch's recall@k" and
never computes it (the list is never cleared), under variable-length batches whose activations change size each
step: ~1.5 MiB/s of kept embeddings.

Held out at first (written after the verdict was tuned on benchmarks/scenarios/). c4dfff8's live line said "the
floor is flat" in 2 of its 6 runs before it said leak, and 37b103f was made on that: in-sample for that change."""

TRUTH = {"verdict": "leak", "growth": "leak", "rate_mib_per_s": 1.5, "seconds": 75}

import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios"))

import torch  # noqa: E402
from _common import Clock, log, seconds, truth  # noqa: E402
from torch import nn  # noqa: E402

if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    enc = nn.Sequential(nn.Embedding(1000, 128), nn.Flatten(0, 1), nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256))
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    clock = Clock(seconds(TRUTH["seconds"]))
    all_embeddings: list[torch.Tensor] = []
    t_first = None
    while clock.running():
        seq = rng.choice((16, 32, 64, 128))  # variable-length batches: the activations change size every step
        tokens = torch.randint(0, 1000, (32, seq))
        emb = enc(tokens).view(32, seq, 256).mean(1)
        loss = (emb**2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        # Kept for a metric at the epoch's end that never comes: 16 copies of the batch's embeddings (32 x 256
        # floats each, 32 KiB), as a k-NN bank with augmentations would keep them.
        all_embeddings.append(emb.detach().repeat(16, 1).clone())
        if t_first is None:
            t_first = clock.now()
        time.sleep(0.3)
        log(clock, loss)
    kept = sum(t.numel() * t.element_size() for t in all_embeddings)
    truth(kept_bytes=kept, rate_bytes_per_s=kept / max(1e-9, clock.now() - (t_first or 0)))
