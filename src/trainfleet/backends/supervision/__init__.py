"""What every backend that starts processes shares: the shim that supervises a task (its
records, its log), reading those records, this machine's ports, and the container runtime
command that runs a task with an image.

The local backend runs the shim on this machine; the Slurm backend runs it on each node
through its bootstrap. Neither imports the other.
"""

from pathlib import Path

SHIM = Path(__file__).with_name("shim.py")
"""The supervisor program, run as ``python -I -S SHIM ...`` (standard library only)."""
