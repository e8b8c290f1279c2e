"""A small DDP (gloo) training loop that reports its own steps per second.

Started by torchrun; prints ``rank=R steps_per_s=X`` measured after a warm-up.
"""

import os
import time

import torch
import torch.distributed as dist
from torch import nn

WARMUP, STEPS = 50, 1000

dist.init_process_group("gloo")
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.parallel.DistributedDataParallel(
    nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs, targets = torch.randn(64, 256), torch.randn(64, 1)
for step in range(WARMUP + STEPS):
    if step == WARMUP:
        started = time.perf_counter()
    optimizer.zero_grad()
    nn.functional.mse_loss(model(inputs), targets).backward()
    optimizer.step()
elapsed = time.perf_counter() - started
print(f"rank={os.environ['RANK']} steps_per_s={STEPS / elapsed:.2f}", flush=True)
dist.destroy_process_group()
