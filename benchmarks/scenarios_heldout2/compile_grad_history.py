"""torch.compile (inductor, its compile-worker pool alive), no wrapper, no evaluation: the training keeps a copy of
every step's flattened gradients "to plot their norms later" (67 KiB a step at ~8 steps a second: a slow leak, ~0.5
MiB/s).

Held out, second round: written after 37b103f and never used to tune the verdict."""

TRUTH = {"verdict": "leak", "growth": "leak", "rate_mib_per_s": 0.5, "seconds": 80}

import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios"))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "4")

import torch  # noqa: E402
from _common import Clock, log, seconds, truth  # noqa: E402
from torch import nn  # noqa: E402
from torch._inductor.async_compile import AsyncCompile  # noqa: E402

if __name__ == "__main__":
    AsyncCompile.warm_pool()  # the pool torch starts itself where Triton is installed (see compile_bash.py)
    AsyncCompile.wakeup()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = torch.compile(model)
    t0 = time.monotonic()
    step(torch.randn(256, 64)).sum().backward()
    print(f"compiled in {time.monotonic() - t0:.1f} s", flush=True)
    clock = Clock(seconds(TRUTH["seconds"]))
    history: list[torch.Tensor] = []
    first = None
    while clock.running():
        x = torch.randn(256, 64)
        loss = nn.functional.cross_entropy(step(x), (x[:, 0] > 0).long())
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        history.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).clone())
        first = clock.now() if first is None else first
        time.sleep(0.12)
        log(clock, loss)
    kept = sum(t.numel() * t.element_size() for t in history)
    truth(kept_bytes=kept, rate_bytes_per_s=kept / max(1e-9, clock.now() - (first or 0)))
