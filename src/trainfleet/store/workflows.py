"""Workflows, their schedules, runs and steps as stored (part of the store:
``Store.workflows``). Rows come in and go out as records; what they mean is
``trainfleet.workflows``'."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from trainfleet.domain.workflow_records import (
    RunRecord,
    RunState,
    ScheduleRecord,
    StepRecord,
    WorkflowRecord,
)
from trainfleet.store import queries
from trainfleet.store.connection import Connection, Row, Transaction
from trainfleet.store.errors import StoreConflict

WORKFLOW_COLUMNS = (
    "id", "name", "team", "user", "source", "filename", "tree", "created_at", "updated_at",
)  # fmt: skip
SCHEDULE_COLUMNS = ("workflow_id", "cron", "timezone", "code", "reason", "last_time")
RUN_COLUMNS = (
    "id", "workflow_id", "workflow", "team", "user", "number", "trigger", "state", "code", "reason",
    "scheduled_for", "parameters", "source", "filename", "tree", "retries", "created_at",
    "started_at", "finished_at",
)  # fmt: skip
STEP_COLUMNS = (
    "run_id", "step", "state", "tries", "jobs", "reason", "started_at", "finished_at",
)  # fmt: skip
ACTIVE = (RunState.WAITING.value, RunState.RUNNING.value)
SELECT_WORKFLOWS = f"SELECT {queries.columns(WORKFLOW_COLUMNS)} FROM workflows"
SELECT_SCHEDULES = f"SELECT {queries.columns(SCHEDULE_COLUMNS)} FROM schedules"
SELECT_RUNS = f"SELECT {queries.columns(RUN_COLUMNS)} FROM runs"


class WorkflowStore:
    """Workflows and their runs; safe to share by threads."""

    def __init__(self, connection: Connection) -> None:
        self._db = connection

    # -- workflows -------------------------------------------------------------

    def put(self, workflow: WorkflowRecord, schedule: ScheduleRecord | None) -> WorkflowRecord:
        """Store a workflow, or replace the one of its team and name (which keeps its id,
        its runs and, where the cron and zone stay, its schedule's state); the record kept."""

        def put(db: Transaction) -> WorkflowRecord:
            found = db.rows(
                f"{SELECT_WORKFLOWS} WHERE team = :team AND name = :name",
                {"team": workflow.team, "name": workflow.name},
            )
            kept = workflow
            if found:
                old = WorkflowRecord.from_row(found[0])
                kept = WorkflowRecord.from_row(
                    {**workflow.to_dict(), "id": old.id, "created_at": old.created_at}
                )
                changed = {k: v for k, v in kept.to_dict().items() if k not in ("id", "created_at")}
                sets = queries.assignments(changed, WORKFLOW_COLUMNS)
                db.execute(f"UPDATE workflows SET {sets} WHERE id = :id", kept.to_dict())
            else:
                db.execute(queries.insert("workflows", WORKFLOW_COLUMNS), kept.to_dict())
            _put_schedule(db, kept.id, schedule)
            return kept

        return self._db.write(put)

    def get(self, workflow_id: str) -> WorkflowRecord | None:
        rows = self._db.rows(
            f"{SELECT_WORKFLOWS} WHERE id = :id",
            {"id": workflow_id},
        )
        return WorkflowRecord.from_row(rows[0]) if rows else None

    def find(self, team: str, name: str) -> WorkflowRecord | None:
        rows = self._db.rows(
            f"{SELECT_WORKFLOWS} WHERE team = :team AND name = :name",
            {"team": team, "name": name},
        )
        return WorkflowRecord.from_row(rows[0]) if rows else None

    def of_teams(self, teams: Collection[str] | None = None) -> list[WorkflowRecord]:
        """The workflows of ``teams`` (every team's: None), by team and name."""
        if teams is not None and not teams:
            return []
        where, params = "", dict[str, str]()
        if teams is not None:
            listed, params = queries.in_list("team", sorted(teams))
            where = f"WHERE team IN {listed}"
        rows = self._db.rows(
            f"{SELECT_WORKFLOWS} {where} ORDER BY team, name",
            params,
        )
        return [WorkflowRecord.from_row(row) for row in rows]

    def delete(self, workflow_id: str) -> bool:
        """Forget a workflow, its schedule, runs and steps; False if there was none."""

        def delete(db: Transaction) -> bool:
            key = {"id": workflow_id}
            runs = "SELECT id FROM runs WHERE workflow_id = :id"
            db.execute(f"DELETE FROM steps WHERE run_id IN ({runs})", key)
            db.execute("DELETE FROM runs WHERE workflow_id = :id", key)
            db.execute("DELETE FROM schedules WHERE workflow_id = :id", key)
            return db.execute("DELETE FROM workflows WHERE id = :id", key) > 0

        return self._db.write(delete)

    # -- schedules -------------------------------------------------------------

    def schedules(self) -> list[ScheduleRecord]:
        """Every stored schedule."""
        rows = self._db.rows(SELECT_SCHEDULES)
        return [ScheduleRecord.from_row(row) for row in rows]

    def schedule(self, workflow_id: str) -> ScheduleRecord | None:
        rows = self._db.rows(
            f"{SELECT_SCHEDULES} WHERE workflow_id = :id",
            {"id": workflow_id},
        )
        return ScheduleRecord.from_row(rows[0]) if rows else None

    def schedules_of(self, workflow_ids: Collection[str]) -> dict[str, ScheduleRecord]:
        """The schedules of these workflows (those that have one), by workflow."""
        if not workflow_ids:
            return {}
        listed, params = queries.in_list("w", sorted(workflow_ids))
        rows = self._db.rows(
            f"{SELECT_SCHEDULES} WHERE workflow_id IN {listed}",
            params,
        )
        return {row["workflow_id"]: ScheduleRecord.from_row(row) for row in rows}

    def latest_runs(self, workflow_ids: Collection[str]) -> dict[str, RunRecord]:
        """The newest run of each of these workflows (those that have one), by workflow."""
        if not workflow_ids:
            return {}
        listed, params = queries.in_list("w", sorted(workflow_ids))
        rows = self._db.rows(
            f"{SELECT_RUNS} WHERE workflow_id IN {listed} AND number = "
            "(SELECT MAX(number) FROM runs AS newer WHERE newer.workflow_id = runs.workflow_id)",
            params,
        )
        return {row["workflow_id"]: _run(row) for row in rows}

    def set_schedule(self, workflow_id: str, **fields: Any) -> bool:
        """Change a schedule's ``code``, ``reason`` or ``last_time``; False if it has none."""
        sets = queries.assignments(fields, ("code", "reason", "last_time"))
        return self._db.write(
            lambda db: (
                db.execute(
                    f"UPDATE schedules SET {sets} WHERE workflow_id = :workflow_id",
                    {**fields, "workflow_id": workflow_id},
                )
                > 0
            )
        )

    # -- runs ------------------------------------------------------------------

    def add_run(
        self, run: RunRecord, steps: Sequence[str], last_time: float | None = None
    ) -> RunRecord | None:
        """Store a run (numbered next in its workflow) and its steps, waiting; with
        ``last_time``, its schedule's latest handled time moves to it in the same
        transaction. None (nothing stored) where the workflow has a run of that
        ``scheduled_for`` already, or is gone."""

        def add(db: Transaction) -> RunRecord | None:
            key = {"id": run.workflow_id}
            if not db.rows("SELECT id FROM workflows WHERE id = :id", key):
                return None
            if run.scheduled_for is not None and db.rows(
                "SELECT id FROM runs WHERE workflow_id = :id AND scheduled_for = :time",
                {**key, "time": run.scheduled_for},
            ):
                return None  # stored by an earlier try, or by another server's thread
            if db.retried and db.rows("SELECT id FROM runs WHERE id = :id", {"id": run.id}):
                return self._run_in(db, run.id)
            rows = db.rows("SELECT MAX(number) AS n FROM runs WHERE workflow_id = :id", key)
            number = int(rows[0]["n"] or 0) + 1
            stored = RunRecord.from_row({**run.to_dict(), "number": number})
            db.execute(queries.insert("runs", RUN_COLUMNS), _run_row(stored))
            db.execute_many(
                queries.insert("steps", (*STEP_COLUMNS, "position")),
                [
                    {**_step_row(StepRecord(run_id=run.id, step=name)), "position": n}
                    for n, name in enumerate(steps)
                ],
            )
            if last_time is not None:
                db.execute(
                    "UPDATE schedules SET last_time = :time WHERE workflow_id = :id",
                    {**key, "time": last_time},
                )
            return stored

        try:
            return self._db.write(add)
        except StoreConflict:  # the same time, stored by a racing writer meanwhile
            return None

    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._db.rows(f"{SELECT_RUNS} WHERE id = :id", {"id": run_id})
        return _run(rows[0]) if rows else None

    def _run_in(self, db: Transaction, run_id: str) -> RunRecord | None:
        rows = db.rows(f"{SELECT_RUNS} WHERE id = :id", {"id": run_id})
        return _run(rows[0]) if rows else None

    def runs(self, workflow_id: str, limit: int = 50, skip: int = 0) -> list[RunRecord]:
        """The workflow's runs, newest first (but the ``skip`` newest)."""
        rows = self._db.rows(
            f"{SELECT_RUNS} WHERE workflow_id = :id ORDER BY number DESC LIMIT :limit OFFSET :skip",
            {"id": workflow_id, "limit": limit, "skip": skip},
        )
        return [_run(row) for row in rows]

    def forget_runs(self, run_ids: Collection[str]) -> None:
        """Forget these runs and their steps (their jobs stay, as jobs)."""
        if not run_ids:
            return
        listed, params = queries.in_list("run", sorted(run_ids))

        def forget(db: Transaction) -> None:
            db.execute(f"DELETE FROM steps WHERE run_id IN {listed}", params)
            db.execute(f"DELETE FROM runs WHERE id IN {listed}", params)

        self._db.write(forget)

    def active_runs(self, workflow_id: str | None = None) -> list[RunRecord]:
        """Runs waiting or running (of one workflow, or of all), oldest first."""
        listed, params = queries.in_list("state", ACTIVE)
        where = f"state IN {listed}"
        if workflow_id is not None:
            where += " AND workflow_id = :id"
            params["id"] = workflow_id
        rows = self._db.rows(f"{SELECT_RUNS} WHERE {where} ORDER BY created_at, id", params)
        return [_run(row) for row in rows]

    def update_run(self, run_id: str, **fields: Any) -> None:
        fields = {k: json.dumps(v) if k == "parameters" else v for k, v in fields.items()}
        sets = queries.assignments(fields, RUN_COLUMNS)
        self._db.write(
            lambda db: db.execute(
                f"UPDATE runs SET {sets} WHERE id = :id", {**fields, "id": run_id}
            )
        )

    def steps(self, run_id: str) -> list[StepRecord]:
        """The run's steps, in the workflow's order."""
        rows = self._db.rows(
            f"SELECT {queries.columns(STEP_COLUMNS)} FROM steps WHERE run_id = :id "
            "ORDER BY position",
            {"id": run_id},
        )
        return [_step(row) for row in rows]

    def update_steps(self, run_id: str, changes: Mapping[str, Mapping[str, Any]]) -> None:
        """Change several steps of a run at once (by step name: the fields to set)."""

        def update(db: Transaction) -> None:
            for step, fields in changes.items():
                row = {k: json.dumps(v) if k == "jobs" else v for k, v in fields.items()}
                sets = queries.assignments(row, STEP_COLUMNS)
                db.execute(
                    f"UPDATE steps SET {sets} WHERE run_id = :run_id AND step = :step",
                    {**row, "run_id": run_id, "step": step},
                )

        if changes:
            self._db.write(update)


def _put_schedule(db: Transaction, workflow_id: str, schedule: ScheduleRecord | None) -> None:
    key = {"id": workflow_id}
    found = db.rows(f"{SELECT_SCHEDULES} WHERE workflow_id = :id", key)
    if schedule is None:
        db.execute("DELETE FROM schedules WHERE workflow_id = :id", key)
        return
    row = {**schedule.to_dict(), "workflow_id": workflow_id}
    if found:
        old = ScheduleRecord.from_row(found[0])
        if (old.cron, old.timezone) == (schedule.cron, schedule.timezone):
            row["last_time"] = old.last_time  # the same times: none runs twice
        db.execute("DELETE FROM schedules WHERE workflow_id = :id", key)
    db.execute(queries.insert("schedules", SCHEDULE_COLUMNS), row)


def _run_row(run: RunRecord) -> dict[str, Any]:
    return {**run.to_dict(), "parameters": json.dumps(run.parameters)}


def _run(row: Row) -> RunRecord:
    return RunRecord.from_row({**row, "parameters": json.loads(row["parameters"])})


def _step_row(step: StepRecord) -> dict[str, Any]:
    return {**step.to_dict(), "jobs": json.dumps(step.jobs)}


def _step(row: Row) -> StepRecord:
    return StepRecord.from_row({**row, "jobs": json.loads(row["jobs"])})
