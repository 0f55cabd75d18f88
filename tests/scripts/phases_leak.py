# Seeds 001/004 in small: training steps, a validation pass that spikes, and (with --leak) a list that keeps
# every validation output. Uses the automatic train/eval phases and memscope.phase / memscope.mark.
import sys
import time

import torch
from torch import nn

import memscope

leak = "--leak" in sys.argv
seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 36
model = nn.Linear(64, 64)
kept = []
end = time.monotonic() + seconds
epoch = 0
while time.monotonic() < end:
    model.train()
    for _ in range(20):
        model(torch.randn(32, 64)).sum().backward()
        time.sleep(0.05)
    model.eval()
    with memscope.phase("validation"):
        spike = torch.ones(40 << 18)  # 40 MiB while validating, then freed
        time.sleep(0.5)
        del spike
        if leak:
            kept.append(torch.ones(3 << 18))  # +3 MiB per epoch, never freed: about 2 MB/s
    memscope.mark(f"epoch {epoch} done")
    epoch += 1
print("epochs", epoch)
