"""What the torch probe (memscope/agent/probes/torch_memory.py) costs a CPU training run, measured piece by piece.

On a run without CUDA the probe does nothing per step: it hooks no per-step path. Its whole cost is
- once, when torch is imported: queueing its CUDA hook on torch.cuda's lazy-init list (``_on_torch``);
- once, when torch._dynamo is imported: patching the compile callback handler's class;
- per compilation (not per step): two messages around each Dynamo compile.
This script times each of them in this interpreter and prints them with the loop time of
benchmarks/train_loop.py for scale (BENCHMARKS.md: about 9 s on the development VM).

    python benchmarks/torch_probe_cost.py

Not measurable here (no GPU): the CUDA sampling (memory_stats per device every 2 s on the probes' thread) and
history recording (PyTorch documents ~2 us per allocation for Python stacks).
"""

from __future__ import annotations

import statistics
import sys
import time


class _Channel:
    def __init__(self) -> None:
        self.sent = 0

    def send(self, msg: dict) -> bool:
        self.sent += 1
        return True


def _median_s(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    import torch
    import torch._dynamo.callback as cb

    from memscope.agent.probes import torch_memory as tm

    ch = _Channel()
    tm._channel = ch
    queued = len(torch.cuda._queued_calls)
    on_torch = _median_s(lambda: tm._on_torch(torch), 50)
    del torch.cuda._queued_calls[queued:]  # the timing loop queued 50 hooks: leave one at most

    handler = cb.CompilationCallbackHandler()
    args = cb.CallbackArgs(cb.CallbackTrigger.DYNAMO, "0/0")

    def one_compile() -> None:
        handler.run_start_callbacks(args)
        handler.run_end_callbacks(args)

    plain = _median_s(one_compile, 2000)
    t = time.perf_counter()
    tm._on_dynamo_callback(cb)
    patch = time.perf_counter() - t
    patched = _median_s(one_compile, 2000)
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}")
    print(f"at torch import (queue the CUDA hook): {on_torch * 1e6:.0f} us, once per process")
    print(f"at torch._dynamo import (patch the callback handler): {patch * 1e6:.0f} us, once per process")
    print(f"per compilation (two messages): {(patched - plain) * 1e6:.1f} us ({ch.sent} messages sent while timing)")
    print("per training step: nothing (no hook on a per-step path; CUDA never initialised: no sampling)")


if __name__ == "__main__":
    main()
