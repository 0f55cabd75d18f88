"""Three small CPU trainings whose memory grows with the batch size, for ``fit_accuracy.py`` (synthetic data).

    python benchmarks/fit_workloads.py cnn --batch 32 --steps 40 --eval-every 20
    python benchmarks/fit_workloads.py lm --batch 16
    python benchmarks/fit_workloads.py loader --batch 64 --workers 3

- cnn: a 4-block conv net on 3x64x64 images, SGD with momentum.
- lm: a 2-layer Transformer language model (d 128, 8 heads, vocabulary 4000, 128 tokens), AdamW.
- loader: a small MLP fed by a DataLoader with worker processes whose samples are built in the workers
  (per-sample augmentation), prefetching 4 batches each: the workers' memory grows with the batch.

Each evaluates every ``--eval-every`` steps (model.eval(), no_grad, the same batch size) and ends by itself after
``--steps`` steps.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int, size: int = 64, classes: int = 10) -> None:
        self.n, self.size, self.classes = n, size, classes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, self.size, self.size, generator=g)
        x = torch.flip(x, dims=[2]) if i % 2 else x  # a per-sample augmentation, done in the worker
        return x * 0.5 + 0.1, i % self.classes


def cnn() -> nn.Module:
    def block(i: int, o: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2))

    return nn.Sequential(
        block(3, 32), block(32, 64), block(64, 128), block(128, 128), nn.Flatten(), nn.Linear(2048, 10)
    )


class LM(nn.Module):
    def __init__(self, vocab: int = 4000, d: int = 128, layers: int = 2, seq: int = 128) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.1, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens) + self.pos
        return self.head(self.body(h, mask=self.mask, is_causal=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["cnn", "lm", "loader"])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--image", type=int, default=64, help="image side (cnn: 64 only)")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    t0 = time.monotonic()
    if a.model == "lm":
        model: nn.Module = LM()
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def batches():
            while True:
                yield torch.randint(0, 4000, (a.batch, 129)), None

        def loss_of(batch):
            tokens = batch[0]
            logits = model(tokens[:, :-1])
            return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))

        train_iter = batches()
    else:
        if a.model == "cnn":
            model = cnn()
            workers = 0
        else:
            model = nn.Sequential(nn.Flatten(), nn.Linear(3 * a.image * a.image, 256), nn.ReLU(), nn.Linear(256, 10))
            workers = a.workers
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        extra = {"prefetch_factor": 4, "persistent_workers": True} if workers else {}
        loader = torch.utils.data.DataLoader(
            Images(a.batch * (a.steps + 3 * (a.steps // a.eval_every) + 2), size=a.image if workers else 64),
            batch_size=a.batch,
            shuffle=True,
            num_workers=workers,
            **extra,
        )

        def loss_of(batch):
            x, y = batch
            return nn.functional.cross_entropy(model(x), y)

        train_iter = iter(loader)
    for step in range(1, a.steps + 1):
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(next(train_iter))
        loss.backward()
        opt.step()
        if step % a.eval_every == 0:
            model.eval()
            with torch.no_grad():
                for _ in range(3):
                    loss_of(next(train_iter))
    print(f"done {a.model} batch {a.batch}: {a.steps} steps in {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
