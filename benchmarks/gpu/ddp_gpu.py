"""A small bf16 MLP trained with DDP over NCCL, one GPU per rank; prints its steps per second.

Started by torchrun, bare or under trainfleet (``scripts/gpu-check.sh``). Prints
``rank=R steps_per_s=X tflops=Y`` after a warm-up. Without CUDA (a dry run of the check
script): gloo on CPUs, float32, small.
"""

import os
import time

import torch
import torch.distributed as dist
from torch import nn

CUDA = torch.cuda.is_available()
STEPS = int(os.environ.get("GPU_CHECK_STEPS", "300" if CUDA else "30"))
WARMUP = 20 if CUDA else 5
WIDTH, BATCH, LAYERS = (8192, 8192, 4) if CUDA else (256, 64, 2)
DTYPE = torch.bfloat16 if CUDA else torch.float32

dist.init_process_group("nccl" if CUDA else "gloo")
local = int(os.environ.get("LOCAL_RANK", "0"))
device = torch.device("cuda", local) if CUDA else torch.device("cpu")
if CUDA:
    torch.cuda.set_device(device)
torch.manual_seed(0)
layers: list[nn.Module] = []
for _ in range(LAYERS):
    layers += [nn.Linear(WIDTH, WIDTH, bias=False), nn.ReLU()]
model = nn.Sequential(*layers).to(device=device, dtype=DTYPE)
ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local] if CUDA else None)
optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-4)
inputs = torch.randn(BATCH, WIDTH, device=device, dtype=DTYPE)


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


for step in range(WARMUP + STEPS):
    if step == WARMUP:
        sync()
        started = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    ddp(inputs).float().square().mean().backward()
    optimizer.step()
sync()
elapsed = time.perf_counter() - started
flops = 6 * BATCH * WIDTH * WIDTH * LAYERS * STEPS / elapsed  # forward 2, backward 4
rank = os.environ.get("RANK", "0")
print(f"rank={rank} steps_per_s={STEPS / elapsed:.2f} tflops={flops / 1e12:.1f}", flush=True)
dist.destroy_process_group()
