"""A small CPU CNN training whose memory grows with the batch (argv[1]): 4 conv blocks on synthetic 3x64x64
images (the largest activation 256 KiB a sample: under glibc's 32 MiB mmap threshold up to batch 127), SGD with momentum, 12 steps, an evaluation (model.eval(), no_grad, 2 batches) every 4 steps; ends by itself."""

import sys

import torch
from torch import nn

batch = int(sys.argv[1])
torch.manual_seed(0)
torch.set_num_threads(1)


def block(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(), nn.MaxPool2d(2))


model = nn.Sequential(block(3, 16), block(16, 32), block(32, 64), block(64, 64), nn.Flatten(), nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for step in range(1, 13):
    model.train()
    x, y = torch.randn(batch, 3, 64, 64), torch.randint(0, 10, (batch,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 4 == 0:
        model.eval()
        with torch.no_grad():
            for _ in range(2):
                model(torch.randn(batch, 3, 64, 64)).sum()
print("done", batch, flush=True)
