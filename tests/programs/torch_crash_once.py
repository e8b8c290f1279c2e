"""A torchrun program for tests: all-reduces for a few steps; rank 1 dies once midway.

The first attempt of rank 1 exits with code 3 after step 5 (leaving a ``crashed`` file);
every later attempt runs to the end, and rank 0 prints ``done: N ranks, sum=S``.
"""

import os
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group(backend="gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
marker = Path("crashed")
total = torch.zeros(1)
for step in range(10):
    if rank == 1 and step == 5 and not marker.exists():
        marker.touch()
        print("rank 1 crashes", flush=True)
        os._exit(3)
    value = torch.ones(1)
    dist.all_reduce(value)
    total += value
if rank == 0:
    print(f"done: {world_size} ranks, sum={int(total.item())}", flush=True)
dist.barrier()
dist.destroy_process_group()
