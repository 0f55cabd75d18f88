"""A representative, deterministic CPU training loop for memscope's overhead benchmark.

A small conv net on synthetic 3x32x32 images (10 classes, a class-dependent pattern plus noise, so the loss
really falls), a training DataLoader and a validation DataLoader, each with 2 persistent workers that do
per-sample augmentation in Python (flip + shift + noise), SGD with momentum, and a validation pass after every
epoch. Everything is seeded: the same arguments give the same losses, under memscope or not.

torch.set_num_threads(1) in the main process (workers are single-threaded anyway): on a 2-core machine, the
main's intra-op threads would otherwise fight the 2 workers and the timings get noisy.

At the end it prints ``LOOP_SECONDS=<float>``: wall time from the first optimizer step (the first batch has
arrived, so the training workers are up) to the end of the last validation pass. Interpreter start-up, the
torch import, building the data and the training workers' start-up are excluded.

    python benchmarks/train_loop.py                 # the full loop (~10-15 s on 2 cores)
    python benchmarks/train_loop.py --steps 60      # a short one (CI smoke)
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--steps", type=int, default=int(os.environ.get("TRAIN_LOOP_STEPS", 350)), help="training steps in all (350)"
    )
    ap.add_argument(
        "--steps-per-epoch", type=int, default=70, help="steps per epoch; a validation pass after each (70)"
    )
    ap.add_argument("--val-batches", type=int, default=8, help="batches per validation pass (8)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    n_classes = 10
    patterns = torch.randn(n_classes, 3, 32, 32)

    def make(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, n_classes, (n,), generator=gen)
        x = 0.5 * patterns[y] + torch.randn(n, 3, 32, 32, generator=gen)
        return x, y

    class Images(Dataset):
        """Per-sample augmentation, seeded by the index: the same batch whichever worker makes it."""

        def __init__(self, x: torch.Tensor, y: torch.Tensor, augment: bool) -> None:
            self.x, self.y, self.augment = x, y, augment

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            img = self.x[i]
            if self.augment:
                g = torch.Generator().manual_seed(args.seed * 1_000_003 + i)
                if torch.rand((), generator=g) < 0.5:
                    img = img.flip(-1)
                dx, dy = (int(v) for v in torch.randint(-2, 3, (2,), generator=g))
                img = torch.roll(img, shifts=(dy, dx), dims=(-2, -1))
                img = img + 0.05 * torch.randn(img.shape, generator=g)
            return img, self.y[i]

    g = torch.Generator().manual_seed(args.seed + 1)
    train_x, train_y = make(args.steps_per_epoch * args.batch_size, g)  # one epoch = steps_per_epoch
    val_x, val_y = make(args.val_batches * args.batch_size * 2, g)
    loader_kw = dict(batch_size=args.batch_size, num_workers=args.workers, persistent_workers=args.workers > 0)
    train = DataLoader(
        Images(train_x, train_y, augment=True),
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(args.seed + 2),
        **loader_kw,
    )
    val = DataLoader(
        Images(val_x, val_y, augment=False),
        batch_size=args.batch_size * 2,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )

    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 16x16
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 128),
        nn.ReLU(),
        nn.Linear(128, n_classes),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step, epoch = 0, 0
    t_first = None
    train_loss = val_loss = val_acc = float("nan")
    while step < args.steps:
        model.train()
        in_epoch = 0
        running = 0.0
        for xb, yb in train:
            if t_first is None:
                t_first = time.perf_counter()
            loss = loss_fn(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.item()
            step += 1
            in_epoch += 1
            if in_epoch == args.steps_per_epoch or step == args.steps:
                break
        train_loss = running / max(in_epoch, 1)
        model.eval()
        total = correct = 0
        val_sum = 0.0
        with torch.no_grad():
            for xb, yb in val:
                out = model(xb)
                val_sum += loss_fn(out, yb).item() * len(yb)
                correct += int((out.argmax(1) == yb).sum())
                total += len(yb)
        val_loss, val_acc = val_sum / total, correct / total
        print(
            f"epoch {epoch} step {step}: train_loss {train_loss:.4f} val_loss {val_loss:.4f} val_acc {val_acc:.3f}",
            flush=True,
        )
        epoch += 1
    t_last = time.perf_counter()
    print(f"FINAL train_loss={train_loss:.6f} val_loss={val_loss:.6f} val_acc={val_acc:.4f}", flush=True)
    print(f"LOOP_SECONDS={t_last - (t_first if t_first is not None else t_last):.4f}", flush=True)


if __name__ == "__main__":
    main()
