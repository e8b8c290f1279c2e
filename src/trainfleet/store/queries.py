"""The store's SQL text, built from known column names only (values are always parameters)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

UNFINISHED = "state NOT IN ('cancelled', 'failed', 'succeeded')"
"""A job or task that has not ended, word for word as the partial indexes of revision 0010
say it (SQLite uses such an index only where the query repeats its condition)."""


def columns(names: Sequence[str]) -> str:
    """``"a", "b"``: every name quoted, as ``user`` is reserved in PostgreSQL."""
    return ", ".join(f'"{name}"' for name in names)


def insert(table: str, names: Sequence[str]) -> str:
    values = ", ".join(f":{name}" for name in names)
    return f"INSERT INTO {table} ({columns(names)}) VALUES ({values})"


def assignments(fields: Mapping[str, Any], allowed: Collection[str]) -> str:
    """``"a" = :a, ...`` for an UPDATE; ValueError for a column that is not ``allowed``."""
    unknown = set(fields) - set(allowed)
    if unknown:  # column names are spliced into SQL: only known ones may pass
        raise ValueError(f"unknown column(s): {', '.join(sorted(unknown))}")
    return ", ".join(f'"{name}" = :{name}' for name in fields)


def in_list(prefix: str, values: Sequence[str]) -> tuple[str, dict[str, str]]:
    """``(:p0, :p1, ...)`` and its parameters, for ``column IN (...)``."""
    params = {f"{prefix}{n}": value for n, value in enumerate(values)}
    return "(" + ", ".join(f":{name}" for name in params) + ")", params


def job_filter(
    *,
    state: str | None,
    name: str | None,
    user: str | None,
    labels: Mapping[str, str],
    after: tuple[float, str] | None,
    teams: Collection[str] | None = None,
    queue: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The WHERE clause (``""`` for none) and parameters of a listing of jobs."""
    conditions: list[str] = []
    params: dict[str, Any] = {}
    for column, value in (("state", state), ("name", name), ("user", user), ("queue", queue)):
        if value is not None:
            conditions.append(f'"{column}" = :{column}')
            params[column] = str(value)
    for n, (key, value) in enumerate(sorted(labels.items())):
        conditions.append(
            "EXISTS (SELECT 1 FROM job_labels AS l WHERE l.job_id = jobs.id"
            f' AND l."key" = :label_key{n} AND l."value" = :label_value{n})'
        )
        params[f"label_key{n}"], params[f"label_value{n}"] = key, value
    if teams is not None:
        listed, names = in_list("team", sorted(teams))
        conditions.append(f"team IN {listed}")
        params.update(names)
    if after is not None:
        # Keyset: rows strictly after the cursor in (created_at DESC, id DESC) order.
        conditions.append(
            "created_at <= :after_time AND (created_at < :after_time OR id < :after_id)"
        )
        params["after_time"], params["after_id"] = after
    return ("WHERE " + " AND ".join(conditions) if conditions else ""), params


def counted(
    *,
    name: str | None,
    user: str | None,
    labels: Mapping[str, str],
    teams: Collection[str] | None,
    queue: str | None,
) -> tuple[str, dict[str, Any]] | None:
    """The query of how many jobs match, by state, from the counts the database keeps
    (revision 0010), with its parameters; None for filters those counts do not cover
    (a name, a user, several labels)."""
    if name is not None or user is not None or len(labels) > 1:
        return None
    conditions: list[str] = []
    params: dict[str, Any] = {}
    table = "job_counts"
    for key, value in labels.items():
        table = "job_label_counts"
        conditions.append('"key" = :label_key AND "value" = :label_value')
        params["label_key"], params["label_value"] = key, value
    if teams is not None:
        listed, names = in_list("team", sorted(teams))
        conditions.append(f"team IN {listed}")
        params.update(names)
    if queue is not None:
        conditions.append("queue = :queue")
        params["queue"] = queue
    where = "WHERE " + " AND ".join(conditions) if conditions else ""
    query = f"SELECT state, SUM(n) AS n FROM {table} {where} GROUP BY state HAVING SUM(n) > 0"
    return query, params
