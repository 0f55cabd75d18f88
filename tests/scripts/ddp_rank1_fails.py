# Launched by torchrun (2 ranks, gloo on CPU): rank 1 raises first; rank 0, waiting in an all_reduce, fails
# after it (gloo: the peer closed the connection) or is stopped by torchrun.
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
if rank == 1:
    raise ValueError("rank 1: labels out of range (42 >= 10)")
time.sleep(0.5)
t = torch.ones(4)
dist.all_reduce(t)
time.sleep(30)
