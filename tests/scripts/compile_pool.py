"""torch.compile with inductor's compile-worker pool, then idle for HOLD_S seconds with the pool alive.

On a CPU-only torch, inductor starts its pool only for Triton (not installed): this script starts the same pool
with the calls torch makes itself when Triton is there (torch._dynamo.backends.inductor -> maybe_warm_pool:
AsyncCompile.warm_pool() then wakeup()). With TORCHINDUCTOR_COMPILE_THREADS=1 torch starts no pool."""

import sys
import time

import torch
from torch._inductor.async_compile import AsyncCompile

HOLD_S = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0

AsyncCompile.warm_pool()
AsyncCompile.wakeup()
AsyncCompile.wait_pool_ready()


@torch.compile
def f(x):
    return (x.sin() * 2 + 1).relu().sum()


print("compiled", float(f(torch.randn(100))), flush=True)
time.sleep(HOLD_S)
print("done", flush=True)
