"""One task of a shared GPU: asks for a part of the device's memory, then multiplies.

usage: gpu_share.py WANT SECONDS [OUT]: allocates WANT (a fraction of the device's total
memory, as CUDA reports it), prints whether it got it (``memory=ok`` or ``memory=oom`` with
CUDA's message; an out-of-memory error is the share holding), then runs bf16 8192x8192
matmuls for SECONDS and prints ``matmul_tflops=X``. Without CUDA: memory is not tried, and
the matmuls are small, on CPUs (a dry run). ``OUT``: the same lines also into that file.
"""

import os
import sys
import time

import torch

want, seconds = float(sys.argv[1]), float(sys.argv[2])
out = sys.argv[3] if len(sys.argv) > 3 else None
lines = []


def say(line: str) -> None:
    lines.append(line)
    print(line, flush=True)


cuda = torch.cuda.is_available()
say(
    f"sharing={os.environ.get('TRAINFLEET_GPU_SHARING', '-')} "
    f"limit={os.environ.get('CUDA_MPS_PINNED_DEVICE_MEM_LIMIT', '-')} "
    f"threads={os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', '-')}"
)
if cuda:
    total = torch.cuda.get_device_properties(0).total_memory
    try:
        block = torch.empty(int(total * want), dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        say(f"memory=ok want={want:g} bytes={block.numel()}")
        del block
    except torch.OutOfMemoryError as error:
        say(f"memory=oom want={want:g} error={str(error).splitlines()[0][:160]}")
    torch.cuda.empty_cache()
else:
    say("memory=skipped (no CUDA)")
size, dtype = (8192, torch.bfloat16) if cuda else (256, torch.float32)
device = "cuda" if cuda else "cpu"
a = torch.randn(size, size, device=device, dtype=dtype)
b = torch.randn(size, size, device=device, dtype=dtype)
for _ in range(5):
    a @ b
if cuda:
    torch.cuda.synchronize()
count, started = 0, time.perf_counter()
while time.perf_counter() - started < seconds:
    for _ in range(10):
        a @ b
    count += 10
    if cuda:
        torch.cuda.synchronize()
elapsed = time.perf_counter() - started
say(f"matmul_tflops={2 * size**3 * count / elapsed / 1e12:.4g} seconds={elapsed:.1f}")
if out:
    with open(out, "w") as handle:
        handle.write("\n".join(lines) + "\n")
