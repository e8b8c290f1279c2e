"""This machine as the scheduler sees it: one node with its CPUs, memory and GPUs."""

from __future__ import annotations

import os
from collections.abc import Sequence

from trainfleet.domain.errors import Misconfigured
from trainfleet.scheduling.cluster import Node
from trainfleet.scheduling.resources import GPU_UNIT, Resources

LOCAL_NODE = "local"


class ResourceConfigError(Misconfigured, ValueError):
    """TRAINFLEET_RESOURCES is not a list of name=count."""


def local_node(gpus: Sequence[int], resources: str = "") -> Node:
    """This machine: its CPUs, memory, the GPUs given, and the named ``resources``
    (``TRAINFLEET_RESOURCES``: ``licence=2,fpga=1``)."""
    capacity = Resources(
        cpu=(os.cpu_count() or 1) * 1000,
        memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        gpu=len(gpus) * GPU_UNIT,
        custom=_custom_resources(resources),
    )
    return Node(LOCAL_NODE, capacity, devices=tuple(gpus))


def _custom_resources(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, _, count = (item.strip() for item in part.partition("="))
        if not name or not count.isdigit():
            raise ResourceConfigError(
                f"TRAINFLEET_RESOURCES: {part!r}: expected name=count, e.g. licence=2"
            )
        found[name] = int(count)
    return found
