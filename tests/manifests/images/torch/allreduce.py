"""The image's ENTRYPOINT: every rank adds its rank + 1 with all_reduce over gloo."""

import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=1)
args = parser.parse_args()

dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK: env://
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.zeros(1)
for _ in range(args.rounds):
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    total += value
print(f"rank {rank} of {world}: sum={int(total.item())} after {args.rounds} rounds", flush=True)
dist.destroy_process_group()
os._exit(0)  # see examples/torch_ddp/README.md: gloo's teardown may abort a finished rank
