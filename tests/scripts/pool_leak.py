# Seed 004 in small, the question the torch.compile incident asks: "is there a slow leak under the validation
# spikes?" A pool of --workers idle children (each holding --worker-mib, like inductor's compile workers) started
# after a few seconds; the main keeps --leak-mib-s MiB every second (0: none); every --period seconds a validation
# (memscope.phase("validation")) holds --spike-mib MiB for --spike-s seconds, and keeps --keep-mib of it for good
# (a staircase: each evaluation keeps its outputs). numpy, so the pages are really touched (anonymous memory).
import argparse
import multiprocessing as mp
import os
import time

import numpy as np

import memscope

MIB = 1 << 20


def worker(mib: float, stop) -> None:
    held = np.ones(int(mib * MIB) // 8)  # noqa: F841 (held until the end, like a compile worker's state)
    stop.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--leak-mib-s", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--worker-mib", type=float, default=30)
    ap.add_argument("--pool-at", type=float, default=3.0)
    ap.add_argument("--period", type=float, default=10.0)
    ap.add_argument("--spike-mib", type=float, default=600)
    ap.add_argument("--spike-s", type=float, default=2.0)
    ap.add_argument("--keep-mib", type=float, default=0.0)
    ap.add_argument("--torch", action="store_true", help="switch a torch module to train()/eval() (automatic phases)")
    a = ap.parse_args()
    model = None
    if a.torch:  # memscope's agent sees a top-level module's train()/eval() switches: the training's own phases
        import torch

        model = torch.nn.Linear(8, 8)
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    pool: list = []
    kept: list = []
    t0 = time.monotonic()
    next_val = t0 + a.period
    step = 0.1
    evals = 0
    training = False
    print(f"pid {os.getpid()}: leak {a.leak_mib_s} MiB/s, keep {a.keep_mib} MiB per evaluation", flush=True)
    while time.monotonic() - t0 < a.seconds:
        if not pool and time.monotonic() - t0 >= a.pool_at:
            pool = [ctx.Process(target=worker, args=(a.worker_mib, stop), daemon=True) for _ in range(a.workers)]
            for p in pool:
                p.start()
        if model is not None and not training:
            model.train()
            training = True
        if a.leak_mib_s > 0:
            kept.append(np.ones(int(a.leak_mib_s * step * MIB) // 8))
        time.sleep(step)
        if time.monotonic() >= next_val:
            if model is not None:
                model.eval()
                training = False
            with memscope.phase("validation"):
                spike = np.ones(int(a.spike_mib * MIB) // 8)
                time.sleep(a.spike_s)
                if a.keep_mib > 0:
                    kept.append(np.ones(int(a.keep_mib * MIB) // 8))
                del spike
            evals += 1
            print(f"evaluation {evals} at {time.monotonic() - t0:.1f} s", flush=True)
            next_val += a.period
    stop.set()
    for p in pool:
        p.join(5)
    print(f"TRUTH evaluations={evals}", flush=True)


if __name__ == "__main__":
    main()
