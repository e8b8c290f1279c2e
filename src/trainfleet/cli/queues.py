"""``trainfleet queue``: create, list and describe the queues jobs wait in."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from trainfleet.cli.errors import UserError
from trainfleet.cli.service import JobService
from trainfleet.control.queueing import quota_amounts
from trainfleet.scheduling.resources import describe
from trainfleet.spec.errors import SourceMap, spec_error_from_validation
from trainfleet.spec.queues import Quota
from trainfleet.wire import QueueBody, QueueState

STANDARD = ("cpu", "memory", "gpu")


def parse_quota(flag: str, text: str) -> Quota:
    """``cpu=16,memory=64Gi,gpu=8,licence=2`` as a Quota; UserError names the flag and part."""
    from pydantic import ValidationError

    amounts: dict[str, object] = {}
    custom: dict[str, object] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, sep, value = (item.strip() for item in part.partition("="))
        if not sep or not name or not value:
            raise UserError(f"{flag}: {part!r}: expected name=amount, e.g. gpu=8")
        target = amounts if name in STANDARD else custom
        if name in target:
            raise UserError(f"{flag}: {part!r}: {name} is given twice")
        target[name] = value
    data = {**amounts, "custom": custom}
    try:
        return Quota.model_validate(data)
    except ValidationError as error:
        problem = spec_error_from_validation(error, data, SourceMap(), model=Quota).problems[0]
        raise UserError(
            f"{flag}: {problem.field.removeprefix('custom.')}: {problem.message}"
        ) from None


def create(
    service: JobService,
    name: str,
    cohort: str | None,
    nominal: str | None,
    borrowing_limit: str | None,
) -> QueueState:
    from pydantic import ValidationError

    fields = {
        "cohort": cohort,
        "nominal": parse_quota("--nominal", nominal) if nominal else Quota(),
        "borrowing_limit": (
            parse_quota("--borrowing-limit", borrowing_limit) if borrowing_limit else None
        ),
    }
    try:
        body = QueueBody.model_validate(fields)
    except ValidationError as error:
        problem = spec_error_from_validation(error, fields, SourceMap(), model=QueueBody)
        raise UserError(str(problem)) from None
    return service.put_queue(name, body)


def find(service: JobService, name: str) -> QueueState:
    for queue in service.queues():
        if queue.queue.name == name:
            return queue
    raise UserError(f"no queue {name!r} (see trainfleet queue list)")


def quota_text(quota: Quota | None) -> str:
    if quota is None:
        return "-"
    amounts = quota_amounts(quota).items()
    return ", ".join(describe(name, amount) for name, amount in amounts) or "-"


def print_table(queues: list[QueueState]) -> None:
    table = Table(box=None, pad_edge=False)
    for column in ("QUEUE", "COHORT", "NOMINAL", "BORROWING LIMIT", "USED", "RUNNING", "WAITING"):
        table.add_column(column)
    for state in queues:
        queue = state.queue
        used = ", ".join(describe(name, amount) for name, amount in state.used.items()) or "-"
        table.add_row(
            queue.name,
            queue.cohort or "-",
            quota_text(queue.nominal),
            quota_text(queue.borrowing_limit) if queue.cohort else "-",
            used,
            str(len(state.running)),
            str(len(state.waiting)),
        )
    Console(soft_wrap=True).print(table)


def print_details(state: QueueState) -> None:
    print_table([state])
    click.echo(f"\nrunning: {', '.join(state.running) or '-'}")
    click.echo(f"waiting: {', '.join(state.waiting) or '-'}")
