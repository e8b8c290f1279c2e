"""Parameters checked before any lookup: an id like ``../x`` never reaches the disk, and
an unknown query parameter (a typo) is refused rather than ignored."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Request

from trainfleet.datadir.layout import JOB_ID, OUTPUT_NAME
from trainfleet.server.errors import ApiError
from trainfleet.spec.models import ROLE_NAME

JobId = Annotated[str, Path(pattern=JOB_ID.pattern, description="The job's id.")]
Role = Annotated[str, Path(pattern=ROLE_NAME.pattern, description="A role of the job.")]
Index = Annotated[int, Path(ge=0, le=1_000_000, description="The replica's index.")]
OutputName = Annotated[
    str, Path(pattern=OUTPUT_NAME.pattern, description="An output's name: a plain file name.")
]


async def known_query_only(request: Request) -> None:
    """422 for a query parameter the operation does not take: a typo must not be ignored."""
    known = _query_names(request.scope.get("route"))
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        takes = ", ".join(sorted(known)) or "none"
        names = ", ".join(repr(name) for name in unknown)
        raise ApiError(422, f"unknown query parameter {names} (this operation takes: {takes})")


def _query_names(route: object) -> frozenset[str]:
    """The query parameters of a route, its dependencies' included."""
    known = _QUERY_NAMES.get(id(route))
    if known is None:
        known = _QUERY_NAMES[id(route)] = _collect_query_names(route)
    return known


_QUERY_NAMES: dict[int, frozenset[str]] = {}
"""By route id: routes live as long as their application."""


def _collect_query_names(route: object) -> frozenset[str]:
    names: set[str] = set()
    pending = [getattr(route, "dependant", None)]
    while pending:
        dependant = pending.pop()
        if dependant is not None:
            names.update(field.alias for field in dependant.query_params)
            pending.extend(dependant.dependencies)
    return frozenset(names)
