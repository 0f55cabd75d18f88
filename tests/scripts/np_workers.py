"""A numpy-only training with two multiprocessing workers that make its batches (the shape of a DataLoader, with
no torch: Colab's Python 3.13 replica has none). argv: seconds (default 4), then an optional exit code."""

import multiprocessing as mp
import sys
import time

import numpy as np


def batch(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((256, 64)).astype(np.float32), rng.standard_normal((256, 1)).astype(np.float32)


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
    w = np.zeros((64, 1), np.float32)
    held = np.ones(8 << 20, np.uint8)  # 8 MiB the workers share with the main after the fork
    t0, step = time.monotonic(), 0
    with mp.get_context("fork").Pool(2) as pool:
        while time.monotonic() - t0 < seconds:
            for x, y in pool.imap(batch, range(step, step + 8)):
                w -= 1e-3 * x.T @ (x @ w - y) / len(x)
                step += 1
            print(f"step {step} loss {float(np.mean((x @ w - y) ** 2)):.4f}", flush=True)
            time.sleep(0.05)
    print("finished", step, flush=True)
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
