"""A share of a GPU asked by memory (``resources: {gpu_memory: 20Gi}``) becomes the fraction of
one GPU that holds it, at submission: from then on it is placed and enforced as any fraction
(``gpu: 0.25``), the stored job keeping both what was asked and what it became.

>>> from trainfleet.spec.models import JobSpec
>>> job = JobSpec.model_validate({"name": "j", "roles": {"w": {"command": "true",
...     "resources": {"gpu_memory": "20Gi"}}}})
>>> sized_by_memory(job, lambda: 80 * 2**30).roles["w"].resources.gpu
0.25
"""

from __future__ import annotations

import math
from collections.abc import Callable

from trainfleet.scheduling.placement import Unschedulable
from trainfleet.scheduling.resources import GPU_UNIT
from trainfleet.spec.models import JobSpec
from trainfleet.spec.quantity import format_memory


def sized_by_memory(spec: JobSpec, device_memory: Callable[[], int | None]) -> JobSpec:
    """``spec`` with each ``gpu_memory`` as the fraction of a GPU of ``device_memory()``
    bytes (the smallest GPU here) that holds it, rounded up to a thousandth.

    Raises Unschedulable, naming the field, where no GPU memory is known, where no GPU
    holds that much, or where a role also asks another ``gpu``."""
    asking = {name: role for name, role in spec.roles.items() if role.resources.gpu_memory}
    if not asking:
        return spec
    device = device_memory()
    sized = {}
    for name, role in asking.items():
        asked = role.resources.gpu_memory or 0
        field = f"roles.{name}.resources.gpu_memory"
        if device is None:
            raise Unschedulable(
                f"{field}: no GPU here reports its memory (NVML), so a share cannot be sized "
                "by it; ask for a fraction instead (gpu: 0.5)"
            )
        if asked > device:
            raise Unschedulable(
                f"{field}: {format_memory(asked)} is more than a GPU here holds "
                f"({format_memory(device)})"
            )
        thousandths = math.ceil(asked * GPU_UNIT / device)
        fraction = 1.0 if thousandths >= GPU_UNIT else thousandths / GPU_UNIT
        if role.resources.gpu not in (0, fraction):  # a stored job's, sized here, passes
            raise Unschedulable(f"{field}: ask for gpu or for gpu_memory, not both")
        resources = role.resources.model_copy(update={"gpu": fraction})
        sized[name] = role.model_copy(update={"resources": resources})
    return spec.model_copy(update={"roles": {**spec.roles, **sized}})
