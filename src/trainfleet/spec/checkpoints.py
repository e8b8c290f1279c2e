"""Where a job's checkpoints go (``checkpoint: {path, keep}``; ``checkpoint_path``
and Submarine's ``--checkpoint_path`` name the same folder).

Every task finds the folder in ``$TRAINFLEET_CHECKPOINT_PATH`` (without a path: a folder
of the job under the data directory, never a task's own), how many committed steps to
keep in ``$TRAINFLEET_CHECKPOINT_KEEP``, and, once one exists, the newest committed step
in ``$TRAINFLEET_RESUME_FROM`` (see ``trainfleet.checkpoint``).

>>> CheckpointSpec.model_validate({"keep": 5}).keep
5
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from trainfleet.checkpoint import HEARTBEAT_VARIABLE

RESTART_VARIABLE = "TRAINFLEET_RESTART"
RESUME_VARIABLE = "TRAINFLEET_RESUME_FROM"
STOP_VARIABLE = "TRAINFLEET_STOP_FILE"
"""Where a task reads, once trainfleet stops it (SIGTERM), why: ``preempted``,
``time-limit``, ``cancelled``, ``stalled``, ``restarting`` (with the rest of its job),
``finished`` (the job succeeded) or ``failed``."""


class CheckpointSpec(BaseModel):
    """The job's checkpoint folder and how many committed steps it keeps."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    path: str | None = Field(
        default=None,
        description="The folder (relative: to the job's directory); default: a folder of "
        "the job under the data directory. Same as checkpoint_path.",
    )
    keep: Annotated[int, Field(ge=1, le=1000, strict=True)] = Field(
        default=3, description="Committed steps kept (trainfleet.checkpoint prunes to it)."
    )
    shared: Annotated[bool, Field(strict=True)] = Field(
        default=False,
        description="Other jobs that say so too may write to the same folder at the same "
        "time (else a second job on a folder in use is refused).",
    )


class ProgressSpec(BaseModel):
    """When a silent task counts as stalled: restarted (code ``stalled``) as an
    infrastructure failure, as NVIDIA's fault-tolerant launcher does with heartbeats."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    timeout: Annotated[float, Field(gt=0, le=7 * 86400, allow_inf_nan=False)] = Field(
        description="Seconds a running task may stay silent: no line in its log and no "
        f"touch of ${HEARTBEAT_VARIABLE} (trainfleet.checkpoint.save and beat touch it)."
    )
