"""A tiny CPU torch training whose memory grows with the batch (argv[1]): an MLP on 16384 x 32 float inputs per
sample (2 MiB each, about 10 MiB of activations and gradients), 12 steps, an evaluation (model.eval(), no_grad) every 4 steps; ends by itself."""

import sys

import torch
from torch import nn

batch = int(sys.argv[1])
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for step in range(1, 13):
    model.train()
    x = torch.randn(batch, 16384, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 4 == 0:
        model.eval()
        with torch.no_grad():
            model(torch.randn(batch, 16384, 32)).sum()
print("done", batch, flush=True)
