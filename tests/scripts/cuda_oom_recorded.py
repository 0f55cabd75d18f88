"""A CUDA OOM on CPU, with recorded GPU data where the device would be.

torch here is a CPU build: this script stands in for the device. It installs what torch.cuda would call into
(the OOM-observer hook, _snapshot, memory_stats, _record_memory_history), runs the calls torch.cuda queued for
its lazy initialisation (memscope's agent queued its own there when torch was imported), then does what the
caching allocator does at an OOM: calls the observer, and raises torch.OutOfMemoryError.

The data: the allocator snapshot is tests/fixtures/gpu/snapshot_at_oom.pickle, taken at a real CUDA OOM (argv[1]);
memory_stats are sums over its segments; the observer's numbers and the error text are those of seed 003's real
OOM report as the fixtures README quotes it (226.00 MiB tried, 15.89 GiB total, 3.12 MiB free, Process 5691). The
two come from different incidents: this tests the writing path, not a diagnosis.
"""

import pickle
import sys

import torch

with open(sys.argv[1], "rb") as f:
    RECORDED = pickle.load(f)  # a fixture from a known source (README); memscope itself reads it safely

MESSAGE = (
    "CUDA out of memory. Tried to allocate 226.00 MiB. GPU 0 has a total capacity of 15.89 GiB of which "
    "3.12 MiB is free. Process 5691 has 15.67 GiB memory in use."
)
observers, history = [], []
segs = RECORDED["segments"]
STATS = {
    "allocated_bytes.all.current": sum(s["allocated_size"] for s in segs),
    "reserved_bytes.all.current": sum(s["total_size"] for s in segs),
    "active_bytes.all.current": sum(s["active_size"] for s in segs),
    "num_ooms": 1,
}

if "--no-observer" not in sys.argv:  # a PyTorch without the OOM-observer hook: the excepthook saves the snapshot
    torch._C._cuda_attach_out_of_memory_observer = observers.append
torch.cuda.is_initialized = lambda: True  # what _lazy_init() leaves behind
torch.cuda.memory._snapshot = lambda device=None, **kw: RECORDED
torch.cuda.memory_stats = lambda device=None: dict(STATS)
torch.cuda.memory_summary = lambda device=None, abbreviated=False: "recorded snapshot_at_oom.pickle"
torch.cuda.memory._record_memory_history = lambda *a, **kw: history.append(kw)

for fn, _tb in list(torch.cuda._queued_calls):  # what torch.cuda._lazy_init() runs
    fn()
print("observers", len(observers), "history", history, flush=True)


def step():
    for obs in observers:  # the allocator's OOM: observers first, then the error
        obs(0, 226 << 20, int(15.89 * (1 << 30)), int(3.12 * (1 << 20)))
    raise torch.OutOfMemoryError(MESSAGE)


step()
