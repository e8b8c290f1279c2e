"""The GPUs of the machine the engine places tasks on: what each is, how busy and how
healthy, and which tasks hold it (``trainfleet gpus``, ``GET /api/v1/gpus``, ``/metrics``).

Anyone signed in reads them; a task of a team the caller is not in is shown by its share
alone (its job does not exist for the caller, as everywhere). Clearing a GPU's problems is
for administrators (``Action.CLEAR_GPU``: the operator of the machine)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from trainfleet.control.access import Action, Caller
from trainfleet.control.gpu_health import GpuLook
from trainfleet.control.services.reads import JobReads
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.wire import GpuHolder, GpuState

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine


class Gpus:
    """The GPUs of ``engine``'s backend, with the tasks ``reads`` holds on them."""

    def __init__(self, engine: Engine, reads: JobReads) -> None:
        self.engine = engine
        self.reads = reads

    def visible(self, caller: Caller) -> list[GpuState]:
        """Every GPU, its holders of teams the caller does not see left unnamed."""
        holders = list(self._holders())  # read once for all the GPUs
        return [self._state(look, caller, holders) for look in self.engine.gpu_health.look()]

    def every(self) -> list[GpuState]:
        """Every GPU with every holder named, unchecked (for ``/metrics``)."""
        return self.visible(Caller("", admin=True))

    def clear(self, caller: Caller, index: int) -> GpuState:
        """Ignore the problems GPU ``index`` has now, if the caller may (an administrator);
        NotFound where there is no such GPU."""
        caller.require(Action.CLEAR_GPU)
        self.engine.clear_gpu(index, by=caller.user)
        for state in self.visible(caller):
            if state.index == index:
                return state
        raise AssertionError(f"GPU {index} was cleared but is not read again")  # pragma: no cover

    def _state(
        self, look: GpuLook, caller: Caller, holders: list[tuple[JobRecord, TaskRecord, float]]
    ) -> GpuState:
        reading = look.reading
        return GpuState(
            index=reading.index,
            model=reading.model,
            memory_total=reading.memory_total,
            memory_used=reading.memory_used,
            utilisation=reading.utilisation,
            temperature=reading.temperature,
            healthy=look.healthy,
            problems=list(look.problems),
            cleared=list(look.cleared.problems) if look.cleared else [],
            holders=[
                _holder(job, task, share, caller)
                for job, task, share in holders
                if reading.index in _gpus(task)
            ],
        )

    def _holders(self) -> Iterator[tuple[JobRecord, TaskRecord, float]]:
        """Each task of an active job that holds GPUs, with its share of each."""
        for job, tasks in self.reads.active():
            for task in tasks:
                if task.gpus and not State(task.state).is_final:
                    yield job, task, _share(job, task)


def _gpus(task: TaskRecord) -> set[int]:
    return {int(gpu) for gpu in task.gpus.split(",") if gpu.strip().isdigit()}


def _share(job: JobRecord, task: TaskRecord) -> float:
    """1 for a whole GPU; the role's fraction for a shared one."""
    from trainfleet.spec.models import JobSpec

    try:
        asked = JobSpec.model_validate_json(job.spec).roles[task.role].resources.gpu
    except (ValueError, KeyError):
        return 1.0
    return float(asked) if 0 < asked < 1 else 1.0


def _holder(job: JobRecord, task: TaskRecord, share: float, caller: Caller) -> GpuHolder:
    if not caller.sees(Action.READ_JOB, job.team):
        return GpuHolder(task="", share=share)
    return GpuHolder(task=f"{job.name}/{task.role}/{task.index}", job_id=job.id, share=share)
