# One rank of a two-node torchrun job (gloo, CPU): all ranks step in lockstep through all_reduce, 10 steps a
# second; the rank named by LEAK_RANK keeps 1 MiB per step (a planted leak: 10 MiB/s), the others hold steady.
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
steps = int(float(os.environ.get("TRAIN_SECONDS", "30")) / 0.1)
leaks = rank == int(os.environ.get("LEAK_RANK", "-1"))
model = torch.nn.Linear(256, 256)
kept = []
x = torch.ones(1)
print(f"rank {rank} of {dist.get_world_size()} training", flush=True)
model.train()  # as any training does: memscope's leak fit starts at the training, not at torch's import
dist.barrier()
t0 = time.monotonic()
for step in range(steps):
    dist.all_reduce(x)
    y = model(torch.randn(64, 256)).sum()
    if leaks:
        kept.append(torch.ones(1 << 18))  # 1 MiB, touched
    # A step every 0.1 s (on a loaded machine too: the deadline, not the sleep, sets the pace).
    time.sleep(max(0.0, t0 + (step + 1) * 0.1 - time.monotonic()))
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
