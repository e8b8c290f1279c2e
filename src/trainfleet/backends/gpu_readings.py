"""What a backend tells of the GPUs it places tasks on: one reading per GPU, now."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class GpuReading:
    """One GPU as its driver reports it now; a field is None where it cannot tell."""

    index: int
    """Its host index (as ``CUDA_VISIBLE_DEVICES`` counts without remapping)."""
    model: str = ""
    memory_total: int | None = None
    """Bytes."""
    memory_used: int | None = None
    """Bytes, by every process on it."""
    utilisation: float | None = None
    """Percent of the last sample period in which a kernel ran."""
    temperature: int | None = None
    """Degrees Celsius."""
    problems: tuple[str, ...] = ()
    """What the driver says is wrong now (``lost: ...``, ``ecc: ...``); () where it is well
    or nothing could be read."""
    events: tuple[str, ...] = ()
    """What the driver reported of it since the last reading (``xid 79: ...``): one-off,
    for the reader to keep until an operator clears the GPU."""


@runtime_checkable
class GpuReader(Protocol):
    """A backend that reads the GPUs it hands out itself (this machine's)."""

    def read_gpus(self) -> list[GpuReading]:
        """Each GPU tasks may be placed on, read now."""
        ...
