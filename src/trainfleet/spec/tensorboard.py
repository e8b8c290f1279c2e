"""A job's TensorBoard (``tensorboard: {logdir, keep_after}``, Submarine's ``--tensorboard``).

The job gets one more role, ``tensorboard``, that runs the ``tensorboard`` package on a port
of the job, on loopback: a service whose end never decides the job's, stopped ``keep_after``
seconds after the job ends.

>>> TensorBoardSpec.model_validate({"keep_after": "10m"}).keep_after
600.0
>>> parse_duration("1h30m"), parse_duration(90)
(5400.0, 90.0)
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

ROLE = "tensorboard"
"""The role a job's ``tensorboard:`` adds."""

PROGRAM_WORDS = ("trainfleet", "tensorboard-serve")
"""Its command, made standalone at launch (``frameworks.argv``): machine-independent."""

SERVICE_ROLE: dict[str, Any] = {
    "command": list(PROGRAM_WORDS),
    "tracked": False,
    "restart_policy": "never",
    "image": None,
}
"""The role, as a job file would write it (a stored job reads it back as the same role)."""

LOGDIR_VARIABLE = "TRAINFLEET_TENSORBOARD_DIR"
"""Every task of a job with a TensorBoard finds its log folder there (absolute)."""

DEFAULT_LOGDIR = "tensorboard"
"""Under the job's directory, where the job sets no checkpoint_path."""

MAX_KEEP_AFTER = 24 * 3600.0

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")
DURATION_PATTERN = r"^(\d+(\.\d+)?h)?(\d+(\.\d+)?m)?(\d+(\.\d+)?s?)?$"


def parse_duration(value: Any) -> float:
    """Seconds from a number of seconds or a text such as ``90``, ``45s``, ``10m``, ``1h30m``."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a text such as 10m, not a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip() and (match := _DURATION.match(value.strip())):
        hours, minutes, rest = (float(part or 0) for part in match.groups())
        seconds = hours * 3600 + minutes * 60 + rest
    else:
        raise ValueError(f"{value!r} is not a duration: seconds, or a text such as 45s, 10m, 1h30m")
    if not 0 <= seconds <= MAX_KEEP_AFTER:
        raise ValueError(f"must be between 0 and 24h ({MAX_KEEP_AFTER:g} seconds), not {seconds:g}")
    return seconds


def _no_nul(value: str) -> str:
    if "\0" in value or not value.strip():
        raise ValueError("must be a path: not empty, no NUL character")
    return value


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": MAX_KEEP_AFTER},
                {"type": "string", "pattern": DURATION_PATTERN},
            ],
            "description": "Seconds, or a text such as 45s, 10m, 1h30m (at most 24h).",
        }
    ),
]


class TensorBoardSpec(BaseModel):
    """Where the job's event files are, and how long its TensorBoard outlives it."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    logdir: Annotated[str, AfterValidator(_no_nul)] | None = Field(
        default=None,
        description="The folder TensorBoard reads (relative: to the job's directory). "
        "Default: the job's checkpoint_path, else `tensorboard` in the job's directory. "
        f"Every task finds it in ${LOGDIR_VARIABLE}.",
    )
    keep_after: Duration = Field(
        default=0.0,
        description="How long TensorBoard stays up after the job ends: 0 (the default) stops "
        "it with the job; e.g. 10m to look at a finished job's curves.",
    )


def shorthand(value: Any) -> Any:
    """``true`` is ``{}``; ``false``, none (``tensorboard: true``, ``notebook: true``)."""
    if value is True:
        return {}
    if value is False:
        return None
    return value
