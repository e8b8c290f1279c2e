"""Queues as an operator writes them: in a file, through the API or ``trainfleet queue``.

.. code-block:: yaml

    queues:
      - name: team-a
        cohort: research
        nominal: {cpu: 32, memory: 256Gi, gpu: 8}
        borrowing_limit: {gpu: 4}
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationError, WithJsonSchema

from trainfleet.spec.errors import SourceMap, spec_error_from_validation
from trainfleet.spec.models import Bytes, CustomResources, Millicores, _Model
from trainfleet.spec.names import JOB_NAME, checked


class Quota(_Model):
    """Amounts by resource; a resource left out is not limited."""

    cpu: Millicores | None = None
    memory: Bytes | None = None
    gpu: Annotated[float, Field(ge=0, le=100_000, allow_inf_nan=False)] | None = None
    custom: CustomResources = Field(default_factory=dict)


def _checked_name(value: str) -> str:
    return checked(JOB_NAME, value, "lower-case letters, digits and '-', at most 63")


QueueName = Annotated[
    str,
    AfterValidator(_checked_name),
    WithJsonSchema({"type": "string", "pattern": JOB_NAME.pattern}),
]
"""A queue or cohort name: what a job name may be."""


class QueueConfig(_Model):
    """One queue: its nominal quota, its cohort, how much it may borrow from the cohort."""

    name: QueueName
    cohort: QueueName | None = None
    nominal: Quota = Field(default_factory=Quota)
    borrowing_limit: Quota | None = Field(
        default=None, description="How far over nominal it may go; unset: what the cohort lends."
    )


def queue_config(name: str, fields: dict[str, Any]) -> QueueConfig:
    """Queue ``name`` from its other fields; raises SpecError naming the bad field."""
    data = {"name": name, **fields}
    try:
        return QueueConfig.model_validate(data)
    except ValidationError as error:
        raise spec_error_from_validation(error, data, SourceMap(), model=QueueConfig) from None


class QueuesFile(_Model):
    """A file of queues (``trainfleet server --queues FILE``)."""

    queues: list[QueueConfig]
