"""``/api/v1/gpus``: the GPUs of the server's machine (model, memory, use, temperature,
health, the tasks on each), and an operator's clearing of a GPU's problems."""

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from trainfleet.domain.records import Audited
from trainfleet.server.audit import Change, audit
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import ERROR_RESPONSES, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.state import GpusDep
from trainfleet.wire import GpuState

MAX_INDEX = 1023
GpuIndex = Annotated[int, Path(ge=0, le=MAX_INDEX, description="The GPU's host index.")]

router = APIRouter(
    prefix="/gpus",
    tags=["gpus"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)
"""Read by anyone signed in (another team's tasks by their share alone); cleared by an
administrator (audited)."""


@router.get("")
def list_gpus(who: Who, gpus: GpusDep) -> list[GpuState]:
    """Each GPU tasks are placed on, as its driver reports it now, with the tasks holding
    it (``job/role/index`` and share; a task of a team the caller is not in: its share)."""
    return gpus.visible(who.caller)


@router.post(
    "/{index}/clear",
    responses=responses(
        _403="The caller is not an administrator.", _404="There is no such GPU here."
    ),
)
def clear_gpu(
    index: GpuIndex,
    who: Who,
    gpus: GpusDep,
    change: Annotated[Change, audit(Audited.GPU_CLEAR, "index")],
) -> GpuState:
    """Mark GPU ``index`` healthy again: the problems its driver reports now are ignored
    (a new one marks it unhealthy again), and waiting jobs may be placed on it."""
    state = gpus.clear(who.caller, index)
    change.detail = f"cleared: {', '.join(state.cleared) or 'no problem'}"
    return state
