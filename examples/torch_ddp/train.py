"""Train a small regression MLP with PyTorch DistributedDataParallel (gloo, CPU).

Start every node with `torchrun train.py`: torchrun reads the node count, this node's rank
and the master's address from the PET_* variables that trainfleet (or Kubeflow) sets.
Each rank trains on its own shard of the data; DDP all-reduces the gradients so every
rank holds the same model.

Under trainfleet it resumes after a restart: rank 0 saves every epoch into
`$TRAINFLEET_CHECKPOINT_PATH/step-<epoch>` and commits it by writing `COMMITTED` last; a
restarted group loads `$TRAINFLEET_RESUME_FROM` (the newest committed step) and goes on from
the epoch after it. Without those variables (Kubeflow) it trains from scratch.
"""

import os
import shutil
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group(backend="gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()

# The same synthetic data on every rank (fixed seed): y = x . [1, -2, 3, 0.5] + 1 + noise.
generator = torch.Generator().manual_seed(0)
x = torch.randn(4096, 4, generator=generator)
noise = 0.1 * torch.randn(4096, 1, generator=generator)
y = x @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]]) + 1 + noise
dataset = TensorDataset(x, y)
sampler = DistributedSampler(dataset, seed=0)  # this rank's shard
loader = DataLoader(dataset, batch_size=64, sampler=sampler)

torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
model = DistributedDataParallel(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.MSELoss()
EPOCHS = int(os.environ.get("EPOCHS", "5"))
CHECKPOINTS = os.environ.get("TRAINFLEET_CHECKPOINT_PATH")
KEEP = int(os.environ.get("TRAINFLEET_CHECKPOINT_KEEP", "3"))


def save(epoch: int) -> None:
    """Write this epoch's step, commit it (COMMITTED last, atomically), drop old ones."""
    folder = os.path.join(CHECKPOINTS, f"step-{epoch}")
    os.makedirs(folder, exist_ok=True)
    state = {"epoch": epoch, "model": model.module.state_dict(), "opt": optimizer.state_dict()}
    torch.save(state, os.path.join(folder, "model.pt"))
    with open(os.path.join(folder, ".COMMITTED.tmp"), "w") as marker:
        marker.write(f"{epoch}\n")
        os.fsync(marker.fileno())
    os.replace(os.path.join(folder, ".COMMITTED.tmp"), os.path.join(folder, "COMMITTED"))
    for old in range(1, epoch - KEEP + 1):
        shutil.rmtree(os.path.join(CHECKPOINTS, f"step-{old}"), ignore_errors=True)


first = 1
if os.environ.get("TRAINFLEET_RESUME_FROM"):
    resume = os.environ["TRAINFLEET_RESUME_FROM"]
    state = torch.load(os.path.join(resume, "model.pt"))
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["opt"])
    first = state["epoch"] + 1
    if rank == 0:
        print(f"resumed after epoch {state['epoch']} from {resume}", flush=True)

for epoch in range(first, EPOCHS + 1):
    sampler.set_epoch(epoch)
    total, batches = torch.zeros(1), 0
    for x_batch, y_batch in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x_batch), y_batch)
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        total += loss.detach()
        batches += 1
    dist.all_reduce(total)  # the mean loss over all ranks
    if rank == 0:
        print(f"epoch {epoch}: loss={total.item() / (batches * world_size):.4f}", flush=True)
        if CHECKPOINTS:
            save(epoch)

if rank == 0 and first <= EPOCHS:
    print(f"done: {world_size} ranks, final loss={total.item() / (batches * world_size):.4f}")
dist.barrier()  # nobody tears down the group while a peer still talks to it
dist.destroy_process_group()
# Leave without the interpreter's teardown: there gloo's destructor (torch 2.13, CPU) now and
# then aborts the process ("terminate called without an active exception") after training.
sys.stdout.flush()
os._exit(0)
