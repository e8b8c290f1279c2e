"""Masking of secret values in a task's output (``***``), fed in chunks.

The implementation lives beside the task's shim (``backends/supervision/masking.py``),
which loads it from its own directory and may import nothing of trainfleet: one masker,
the same in the shim's log capture and wherever trainfleet masks output itself.
"""

from trainfleet.backends.supervision.masking import MASK, MIN_LENGTH, Masker

__all__ = ["MASK", "MIN_LENGTH", "Masker"]
