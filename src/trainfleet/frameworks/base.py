"""What a framework plugin is given: one task, its job and the job's placement."""

from __future__ import annotations

from dataclasses import dataclass

from trainfleet.scheduling.placement import Placement, TaskSlot
from trainfleet.spec.models import JobSpec


@dataclass(frozen=True)
class TaskContext:
    """One task seen from inside its job: enough to build its environment."""

    job_id: str
    spec: JobSpec
    placement: Placement
    role: str
    index: int

    @property
    def slot(self) -> TaskSlot:
        return self.placement.slot(self.role, self.index)
