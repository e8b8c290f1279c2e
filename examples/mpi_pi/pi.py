"""Pi by MPI: each rank integrates its share of 4 / (1 + x^2) over [0, 1]; the all-reduce
sums the shares, so every rank ends with pi, and only if every rank took part."""

import math
import socket
import sys

from mpi4py import MPI

STEPS = 2_000_000

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
width = 1.0 / STEPS
share = sum(4.0 / (1.0 + ((i + 0.5) * width) ** 2) for i in range(rank, STEPS, size)) * width
pi = world.allreduce(share, op=MPI.SUM)


def say(line: str) -> None:
    """One write per line: mpirun merges every rank's output into the launcher's."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


say(f"rank {rank} of {size} on {socket.gethostname()}: share={share:.6f}")
if rank == 0:
    say(f"pi={pi:.10f} from {size} ranks (error {abs(pi - math.pi):.1e})")
