"""memscope's bundled demo: a small training run with DataLoader workers and a validation pass per epoch.

Uses PyTorch (CPU) when it is installed, else plain Python allocations that look alike. It keeps a slowly
growing list of validation outputs (the seed-001 mistake) so the record has something to show.
"""

import argparse
import sys
import time


def progress(epoch, i, n, t0, extra=""):
    """Print a progress line."""
    width = 24
    done = int(width * (i + 1) / n)
    rate = (i + 1) / max(time.monotonic() - t0, 1e-9)
    sys.stdout.write(f"\repoch {epoch} |{'#' * done}{'.' * (width - done)}| {i + 1}/{n} {rate:5.1f} it/s {extra}")
    sys.stdout.flush()


def with_torch(seconds):
    """A tiny torch training that leaks a little each step."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    x = torch.randn(4096, 256)
    y = (x[:, :8].sum(1) > 0).long()
    train = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, num_workers=2, persistent_workers=True)
    val = DataLoader(TensorDataset(x[:1024], y[:1024]), batch_size=256, num_workers=0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    kept = []  # grows every validation: the bug memscope should make visible
    end, epoch = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        model.train()
        t0 = time.monotonic()
        for i, (xb, yb) in enumerate(train):
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i % 8 == 7 or i == len(train) - 1:
                progress(epoch, i, len(train), t0, f"loss {loss.item():.3f}")
        model.eval()
        with torch.no_grad():
            for xb, _ in val:
                kept.append(model[0](xb).repeat(4, 1))  # 2 MiB per batch, never cleared
        sys.stdout.write(f"\nepoch {epoch}: validation done, kept {len(kept)} activations\n")
        epoch += 1


def without_torch(seconds):
    """The same story without torch: a list that grows."""
    kept = []
    end, epoch = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        t0 = time.monotonic()
        for i in range(50):
            scratch = bytearray(8 << 20)
            time.sleep(0.02)
            del scratch
            progress(epoch, i, 50, t0)
        kept.append(bytearray(4 << 20))
        sys.stdout.write(f"\nepoch {epoch}: kept {len(kept)} buffers\n")
        epoch += 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: the demo allocates plain Python buffers instead")
        without_torch(a.seconds)
    else:
        with_torch(a.seconds)
    print("done")
