"""Workflows on a server: submit (store, and run), find, run, pause, resume and delete
them; read, stop and retry their runs, each call checked against the caller
(``access.RULES``). A workflow belongs to a team and to the user who submitted it; its
runs, scheduled or not, run as that user: each step is an ordinary job of theirs.

The runs are driven by ``workflows.driver.RunDriver`` and the schedules fired by
``workflows.firing.ScheduleFiring``, both started with the server (``start``).
"""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainfleet.control.access import Action, Caller
from trainfleet.control.services.ownership import QueueTeams, tree_owner
from trainfleet.domain.errors import BadInput, Conflict, Forbidden, NotFound, Unavailable
from trainfleet.domain.records import State
from trainfleet.domain.workflow_records import (
    RunDetails,
    RunRecord,
    RunState,
    ScheduleCode,
    ScheduleRecord,
    WorkflowDetails,
    WorkflowRecord,
    WorkflowSubmitted,
    WorkflowSummary,
)
from trainfleet.spec.workflows import WorkflowSpec, load_workflow_text, stored_workflow
from trainfleet.workdirs.store import WorkdirStore
from trainfleet.workflows import driver
from trainfleet.workflows.driver import Request, RunDriver
from trainfleet.workflows.firing import ScheduleFiring, new_run
from trainfleet.workflows.steps import parameters_of, step_job
from trainfleet.workflows.times import next_times

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine
    from trainfleet.spec.models import JobSpec

NEXT_TIMES = 5
"""Next run times shown of a schedule."""
ANSWER_WITHIN = 30.0
"""Seconds a stop or a retry waits for the driver's thread."""


class EngineSteps:
    """The steps' jobs on ``engine``, each submitted as its run's owner (``StepJobs``)."""

    def __init__(self, engine: Engine, owners: QueueTeams, trees: WorkdirStore) -> None:
        self.engine = engine
        self.owners = owners
        self.trees = trees

    def submit(self, run: RunRecord, spec: JobSpec) -> str:
        caller = owner_of(self.engine, run.user)
        placed, team = self.owners.for_submission(caller, spec)
        fill = None
        if run.tree:
            whom, digest = run.tree.rsplit("/", 1)
            fill = lambda folder: self.trees.copy(whom, digest, folder)  # noqa: E731
        job = self.engine.submit(
            placed,
            None,
            "workflow",
            user=run.user,
            start=True,
            fill_workdir=fill,
            team=team,
        )
        return job.id

    def state(self, job_id: str) -> tuple[State, str] | None:
        job = self.engine.store.get_job(job_id)
        return None if job is None else (State(job.state), job.reason)

    def cancel(self, job_id: str, reason: str) -> None:
        if self.engine.store.get_job(job_id) is not None:
            self.engine.cancel(job_id, reason)

    def find(self, labels: Mapping[str, str]) -> str | None:
        page = self.engine.store.find_jobs(labels=labels, limit=1)
        return page.jobs[0].id if page.jobs else None

    def folder(self, run: RunRecord) -> Path:
        return self.folder_of(run.tree)

    def folder_of(self, tree: str) -> Path:
        """Where the steps of a workflow sent with ``tree`` (``owner/digest``) are read."""
        if not tree:
            return self.engine.data_dir.root / "workflows" / "no-folder"
        whom, digest = tree.rsplit("/", 1)
        return self.trees.path(whom, digest)

    def remove_run_dir(self, run_id: str) -> None:
        shutil.rmtree(self._run_dirs / run_id, ignore_errors=True)  # fd-based: no link followed

    @property
    def _run_dirs(self) -> Path:
        return self.engine.data_dir.root / "workflows" / "runs"

    def run_dir(self, run: RunRecord) -> Path:
        folder = self._run_dirs / run.id
        if not folder.is_dir():
            folder.mkdir(parents=True, mode=0o700)
            accounts = self.engine.team_accounts
            if accounts is not None:  # the team's tasks run as its own account
                accounts.of(run.team).hand_over(folder)
        return folder


def owner_of(engine: Engine, user: str) -> Caller:
    """The caller a run's steps are submitted as: its owner, as the store has it now;
    Forbidden where the owner is gone or disabled."""
    record = engine.store.accounts.get_user(user)
    if record is None or record.disabled:
        raise Forbidden(f"the workflow's owner {user!r} is disabled: its runs run as its owner")
    teams = {} if record.admin else engine.store.accounts.memberships(user)
    return Caller(user, admin=record.admin, teams=teams)


class Workflows:
    """The workflows ``engine`` keeps, as callers may see and change them."""

    def __init__(self, engine: Engine, owners: QueueTeams, trees: WorkdirStore) -> None:
        self.engine = engine
        self.store = engine.store.workflows
        self.owners = owners
        self.trees = trees
        self.steps = EngineSteps(engine, owners, trees)
        self.driver: RunDriver | None = None
        self.firing: ScheduleFiring | None = None

    def start(self) -> None:
        """Drive the stored runs and fire the schedules (a server's, once)."""
        if self.driver is None:
            self.driver = RunDriver(self.engine.store, self.steps)
            self.firing = ScheduleFiring(self.engine.store, self.driver)

    def close(self) -> None:
        for part in (self.firing, self.driver):
            if part is not None:
                part.close()

    # -- workflows -------------------------------------------------------------------

    def team_for(self, caller: Caller, asked: str | None) -> str:
        """The team a workflow goes to: ``asked``, else the caller's only team (the
        team ``default`` for an administrator)."""
        team = asked or caller.only_team or ("default" if caller.admin else None)
        if team is None:
            raise BadInput("team: name the workflow's team (you are in several teams, or none)")
        caller.require(Action.SUBMIT_WORKFLOW, team, missing=f"team: no team {team!r}")
        if self.engine.store.accounts.get_team(team) is None:
            raise BadInput(f"team: no team {team!r}")
        return team

    def submit(
        self,
        caller: Caller,
        team: str,
        text: str,
        filename: str,
        tree: str | None,
        parameters: Mapping[str, str],
        run: bool = True,
    ) -> WorkflowSubmitted:
        """Store a workflow of ``team`` (replacing the one of its name), then, where it has
        no schedule and ``run``, start a run of it with ``parameters``."""
        spec = load_workflow_text(text, filename)
        values = parameters_of(spec, parameters)
        stored = ""
        if tree is not None:
            whom = tree_owner(caller, team)
            if not self.trees.has(whom, tree):
                raise BadInput(
                    f"tree: no stored tree {tree}: send it first (PUT /api/v1/workdirs/{tree})"
                )
            stored = f"{whom}/{tree}"
        self._check_steps(spec, filename, stored, values)
        old = self.store.find(team, spec.name)
        if old is not None:
            caller.require(Action.CHANGE_WORKFLOW, team, old.user)
        now = time.time()
        record = WorkflowRecord(
            id=f"{spec.name}-{secrets.token_hex(3)}",
            name=spec.name,
            team=team,
            user=caller.user,
            source=text,
            filename=filename,
            tree=stored,
            created_at=now,
            updated_at=now,
        )
        schedule = _schedule_of(record.id, spec, now)
        record = self.store.put(record, schedule)
        started = None
        if schedule is None and run:
            started = self._start(record, values, now)
        if self.firing is not None:
            self.firing.wake()
        state = self.store.schedule(record.id)
        return WorkflowSubmitted(
            workflow=record, run=started, next_times=self._next_times(record, state)
        )

    def find(self, caller: Caller, team: str | None = None) -> list[WorkflowSummary]:
        """The workflows of the caller's teams (of ``team`` only), by team and name, each
        with its schedule, next time and latest run (three queries in all)."""
        teams = caller.teams_seen()
        if team is not None:
            teams = [team] if teams is None or team in teams else []
        found = [
            workflow
            for workflow in self.store.of_teams(teams)
            if caller.decide(Action.READ_WORKFLOW, workflow.team).allowed
        ]
        ids = [workflow.id for workflow in found]
        schedules, latest = self.store.schedules_of(ids), self.store.latest_runs(ids)
        return [
            WorkflowSummary(
                workflow=workflow,
                schedule=schedules.get(workflow.id),
                next_time=min(
                    self._next_times(workflow, schedules.get(workflow.id), 1), default=None
                ),
                last_run=latest.get(workflow.id),
            )
            for workflow in found
        ]

    def readable(
        self, caller: Caller, team: str, name: str, action: Action = Action.READ_WORKFLOW
    ) -> WorkflowRecord:
        """The workflow, if the caller may do ``action`` to it (NotFound, Forbidden)."""
        missing = f"no workflow {name!r} in team {team!r}"
        if not caller.sees(action, team):
            raise NotFound(missing)
        workflow = self.store.find(team, name)
        if workflow is None:
            raise NotFound(missing)
        caller.require(action, team, workflow.user, missing=missing)
        return workflow

    def details(self, workflow: WorkflowRecord, runs: int = 20) -> WorkflowDetails:
        state = self.store.schedule(workflow.id)
        return WorkflowDetails(
            workflow=workflow,
            schedule=state,
            next_times=self._next_times(workflow, state),
            runs=self.store.runs(workflow.id, runs),
        )

    def run(self, workflow: WorkflowRecord, parameters: Mapping[str, str]) -> RunRecord:
        """Start a run of a stored workflow now (checked by ``readable``)."""
        spec = stored_workflow(workflow.source, workflow.filename)
        return self._start(workflow, parameters_of(spec, parameters), time.time())

    def pause(self, workflow: WorkflowRecord, by: str) -> WorkflowDetails:
        self._set_schedule(workflow, ScheduleCode.PAUSED, f"paused by {by}", None)
        return self.details(workflow)

    def resume(self, workflow: WorkflowRecord) -> WorkflowDetails:
        """Fire its schedule again, from now on (missed times are not caught up)."""
        self._set_schedule(workflow, ScheduleCode.ACTIVE, "", time.time())
        return self.details(workflow)

    def delete(self, workflow: WorkflowRecord, by: str) -> None:
        """Stop its runs, then forget it, its runs and their folders (their jobs stay)."""
        for run in self.store.active_runs(workflow.id):
            self._ask(Request(run.id, "stop", f"its workflow was deleted by {by}"))
        runs = [run.id for run in self.store.runs(workflow.id, limit=1_000_000)]
        self.store.delete(workflow.id)
        if self.firing is not None:
            self.firing.wake()
        for run_id in runs:
            self.steps.remove_run_dir(run_id)

    def trees_in_use(self) -> Iterator[str]:
        """The stored trees (``owner/digest``) that workflows and their runs use."""
        for workflow in self.store.of_teams():
            if workflow.tree:
                yield workflow.tree
        for run in self.store.active_runs():
            if run.tree:
                yield run.tree

    # -- runs ------------------------------------------------------------------------

    def readable_run(
        self, caller: Caller, run_id: str, action: Action = Action.READ_WORKFLOW
    ) -> RunRecord:
        missing = f"no workflow run {run_id!r}"
        run = self.store.get_run(run_id)
        if run is None:
            raise NotFound(missing)
        caller.require(action, run.team, run.user, missing=missing)
        return run

    def run_details(self, run: RunRecord, caller: Caller | None = None) -> RunDetails:
        """The run, its steps, what each needs, and what ``caller`` may do to it."""
        spec = stored_workflow(run.source, run.filename)
        allowed = (
            caller is None or caller.decide(Action.CHANGE_WORKFLOW, run.team, run.user).allowed
        )
        return RunDetails(
            run=run,
            steps=self.store.steps(run.id),
            graph={name: list(step.needs) for name, step in spec.steps.items()},
            may=["stop", "retry"] if allowed else [],
        )

    def stop(self, run: RunRecord, by: str) -> RunDetails:
        """Stop a run and its steps' jobs; an ended run stays as it is."""
        if not RunState(run.state).is_final:
            run = self._ask(Request(run.id, "stop", f"stopped by {by}"))
        return self.run_details(run)

    def retry(self, run: RunRecord, start_from: str | None) -> RunDetails:
        """Run again the steps of an ended run that did not succeed (and those they held
        back), or ``start_from`` and every step after it."""
        if not RunState(run.state).is_final:
            raise Conflict(f"run {run.id} is {run.state}: stop it or wait for its end first")
        if run.state == RunState.SKIPPED:
            raise Conflict(f"run {run.id} was skipped ({run.reason}): it has nothing to retry")
        spec = stored_workflow(run.source, run.filename)
        if start_from is not None and start_from not in spec.steps:
            known = ", ".join(spec.steps)
            raise BadInput(f"from: no step {start_from!r} in run {run.id} (steps: {known})")
        if start_from is None and run.state == RunState.SUCCEEDED:
            raise Conflict(f"run {run.id} succeeded: name a step to run again from (--from)")
        newest = {kept.id for kept in self.store.runs(run.workflow_id, driver.FOLDERS_KEPT)}
        if run.id not in newest:
            raise Conflict(
                f"run {run.id} gave its folder back (only the {driver.FOLDERS_KEPT} newest runs "
                "keep theirs): start a new run instead"
            )
        return self.run_details(self._ask(Request(run.id, "retry", start_from=start_from)))

    # -- helpers ---------------------------------------------------------------------

    def _start(self, workflow: WorkflowRecord, values: Mapping[str, Any], now: float) -> RunRecord:
        if self.driver is None:
            raise Conflict(
                "this process drives no workflow runs: a server does (`trainfleet server`), "
                "or run one here in the foreground (`trainfleet workflow run FILE`)"
            )
        spec = stored_workflow(workflow.source, workflow.filename)
        run = self.store.add_run(new_run(workflow, values, now), spec.order())
        if run is None:
            raise NotFound(f"no workflow {workflow.name!r} in team {workflow.team!r}")
        if self.driver is not None:
            self.driver.wake()
        return run

    def _check_steps(
        self, spec: WorkflowSpec, filename: str, tree: str, values: Mapping[str, Any]
    ) -> None:
        """SpecError (file, line, field) for a step whose job cannot be read: each is
        read now, as its run will read it, so that a bad one stores nothing."""
        folder = self.steps.folder_of(tree)
        for name, step in spec.steps.items():
            if step.file is not None and not tree:
                raise BadInput(f"steps.{name}.file: {step.file} cannot be read: no folder was sent")
            step_job(spec, name, folder, values, "/run", filename)

    def _ask(self, request: Request) -> RunRecord:
        if self.driver is None:
            raise Conflict("this process drives no workflow runs (a server does)")
        try:
            return self.driver.request(request).result(timeout=ANSWER_WITHIN)
        except TimeoutError:
            raise Unavailable(
                f"the workflows' thread did not answer in {ANSWER_WITHIN:g} s (is the store "
                "down?): the request stays asked, try to read the run again"
            ) from None

    def _set_schedule(
        self, workflow: WorkflowRecord, code: ScheduleCode, reason: str, last_time: float | None
    ) -> None:
        fields: dict[str, Any] = {"code": code, "reason": reason}
        if last_time is not None:
            fields["last_time"] = last_time
        if not self.store.set_schedule(workflow.id, **fields):
            raise Conflict(f"workflow {workflow.name!r} has no schedule")
        if self.firing is not None:
            self.firing.wake()

    def _next_times(
        self, workflow: WorkflowRecord, state: ScheduleRecord | None, count: int = NEXT_TIMES
    ) -> list[float]:
        """The next ``count`` times of the workflow's schedule (in ``state``), none while
        it is paused."""
        if state is None or state.paused:
            return []
        spec = stored_workflow(workflow.source, workflow.filename)
        if spec.schedule is None:
            return []
        return next_times(spec.schedule, max(state.last_time, time.time()), count)


def _schedule_of(workflow_id: str, spec: WorkflowSpec, now: float) -> ScheduleRecord | None:
    if spec.schedule is None:
        return None
    paused = spec.schedule.paused
    return ScheduleRecord(
        workflow_id=workflow_id,
        cron=spec.schedule.cron,
        timezone=spec.schedule.timezone,
        code=ScheduleCode.PAUSED if paused else ScheduleCode.ACTIVE,
        reason="paused in its file" if paused else "",
        last_time=now,
    )
