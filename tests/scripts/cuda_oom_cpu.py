"""Ends with torch.OutOfMemoryError, raised on CPU: the user's code may raise it, and the text follows the wording of
PyTorch's CUDA caching allocator (hand-written from that format, not recorded on a GPU).

--observer: first calls the agent's OOM observer with hand-written numbers, as torch would on a CUDA OOM, so the
observer's message travels the real channel to the collector."""
import sys

import torch

MESSAGE = ("CUDA out of memory. Tried to allocate 226.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which "
           "120.56 MiB is free. Process 5691 has 15.67 GiB memory in use. Of the allocated memory 14.90 GiB is "
           "allocated by PyTorch, and 512.10 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
           "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def step(batch):
    x = torch.randn(64, 64)
    if batch == 2:
        if "--observer" in sys.argv:
            probe = sys.modules["_memscope_agent.probes.torch_memory"]
            probe._on_oom(0, 226 << 20, 16 << 30, 120 << 20)
        raise torch.OutOfMemoryError(MESSAGE)
    return x @ x


for batch in range(5):
    step(batch)
