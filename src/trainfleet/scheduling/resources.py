"""Amounts of resources: CPU in millicores, memory in bytes, GPUs in thousandths, custom counts.

>>> need = Resources(cpu=2000, memory=2**30, gpu=500)
>>> need.fits(Resources(cpu=4000, memory=2**31, gpu=1000))
True
>>> need.shortfall(Resources(cpu=1000, memory=2**31, gpu=1000))
['cpu']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from trainfleet.spec.quantity import format_memory

GPU_UNIT = 1000
"""A whole GPU, in the thousandths that GPU amounts count in."""

STANDARD = ("cpu", "memory", "gpu")


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of every resource; custom ones are named (``{"license": 1}``)."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0
    custom: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, amounts: Mapping[str, int]) -> Resources:
        """From ``{"cpu": ..., "memory": ..., "gpu": ..., "<custom>": ...}``."""
        custom = {name: amount for name, amount in amounts.items() if name not in STANDARD}
        return cls(amounts.get("cpu", 0), amounts.get("memory", 0), amounts.get("gpu", 0), custom)

    def items(self) -> Iterator[tuple[str, int]]:
        """Every non-zero amount, by name."""
        for name, amount in (("cpu", self.cpu), ("memory", self.memory), ("gpu", self.gpu)):
            if amount:
                yield name, amount
        yield from ((name, amount) for name, amount in self.custom.items() if amount)

    def get(self, name: str) -> int:
        # Spelled out rather than getattr: this is on the scheduler's hot path.
        if name == "gpu":
            return int(self.gpu)
        if name == "cpu":
            return int(self.cpu)
        if name == "memory":
            return int(self.memory)
        return self.custom.get(name, 0)

    def fits(self, free: Resources) -> bool:
        """Whether this amount fits in ``free``."""
        return (
            self.cpu <= free.cpu
            and self.memory <= free.memory
            and self.gpu <= free.gpu
            and (
                not self.custom
                or all(amount <= free.custom.get(name, 0) for name, amount in self.custom.items())
            )
        )

    def shortfall(self, free: Resources) -> list[str]:
        """The names of the resources that do not fit in ``free``."""
        return [name for name, amount in self.items() if amount > free.get(name)]

    def __add__(self, other: Resources) -> Resources:
        return self._combine(other, 1)

    def __sub__(self, other: Resources) -> Resources:
        return self._combine(other, -1)

    def __mul__(self, times: int) -> Resources:
        return Resources(
            self.cpu * times,
            self.memory * times,
            self.gpu * times,
            {name: amount * times for name, amount in self.custom.items()},
        )

    def _combine(self, other: Resources, sign: int) -> Resources:
        if not self.custom and not other.custom:  # the common case, kept fast
            return Resources(
                self.cpu + sign * other.cpu,
                self.memory + sign * other.memory,
                self.gpu + sign * other.gpu,
                {},
            )
        custom = dict(self.custom)
        for name, amount in other.custom.items():
            custom[name] = custom.get(name, 0) + sign * amount
        return Resources(
            self.cpu + sign * other.cpu,
            self.memory + sign * other.memory,
            self.gpu + sign * other.gpu,
            custom,
        )


def total(amounts: Iterable[Resources]) -> Resources:
    """The sum of ``amounts``, as ``sum(amounts, Resources())`` without an object a step."""
    cpu = memory = gpu = 0
    custom: dict[str, int] = {}
    for amount in amounts:
        cpu += amount.cpu
        memory += amount.memory
        gpu += amount.gpu
        for name, count in amount.custom.items():
            custom[name] = custom.get(name, 0) + count
    return Resources(cpu, memory, gpu, custom)


def describe(name: str, amount: int) -> str:
    """An amount as a person reads it: ``cpu 1.5``, ``memory 2Gi``, ``gpu 0.5``."""
    if name == "cpu" or name == "gpu":
        return f"{name} {amount / 1000:g}"
    if name == "memory":
        return f"memory {format_memory(amount)}"
    return f"{name} {amount}"
