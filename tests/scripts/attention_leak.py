"""Seed 003 at small scale: attention maps kept for logging, without .detach(), hold each step's graph."""

import sys
import time

import torch

keep_graph = "--detach" not in sys.argv
torch.manual_seed(0)
attn = torch.nn.MultiheadAttention(embed_dim=32, num_heads=4, batch_first=True)
opt = torch.optim.SGD(attn.parameters(), lr=0.01)
stored = []  # "for visualisation later"
deadline = time.time() + float(sys.argv[1] if len(sys.argv) > 1 and sys.argv[1][0].isdigit() else 20)
step = 0
while time.time() < deadline:
    x = torch.randn(8, 48, 32)
    out, weights = attn(x, x, x, need_weights=True, average_attn_weights=False)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    stored.append(weights if keep_graph else weights.detach())
    step += 1
    if step % 50 == 0:
        print(f"step {step}", flush=True)
    time.sleep(0.01)
print("done", step)
