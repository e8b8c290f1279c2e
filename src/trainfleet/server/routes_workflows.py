"""``/api/v1/workflows`` and ``/api/v1/workflow-runs``: workflows stored on the server
(submitted, run, paused, resumed, deleted) and their runs (read, stopped, retried), each
behind a token and checked by ``access.RULES``; each change audited."""

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from trainfleet.control.access import Action
from trainfleet.domain.records import Audited
from trainfleet.domain.workflow_records import (
    RunDetails,
    RunRecord,
    WorkflowDetails,
    WorkflowSubmitted,
    WorkflowSummary,
)
from trainfleet.server import body
from trainfleet.server.audit import Change, audit
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import ERROR_RESPONSES, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.state import SettingsDep, WorkflowsDep
from trainfleet.wire import NAME_PATTERN
from trainfleet.workdirs.store import DIGEST

Name = Annotated[str, Path(pattern=NAME_PATTERN)]
RunId = Annotated[str, Path(max_length=100, pattern=r"^[a-z0-9][a-z0-9-]*$")]
PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=.*$", re.DOTALL)
Params = Annotated[
    list[Annotated[str, Field(pattern=PARAM.pattern, max_length=4096)]],
    Query(description="`name=value`: a parameter of the run; repeat for several."),
]

router = APIRouter(
    tags=["workflows"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)
"""A team's viewers read its workflows, its members submit and run them and change their
own; its team-admins change any."""


def _values(params: list[str]) -> dict[str, str]:
    pairs = (param.split("=", 1) for param in params)
    return {name: value for name, value in pairs}


@router.post(
    "/workflows",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "A workflow file (`kind: Workflow`) as it is, YAML or JSON.",
            "content": {"application/yaml": {"schema": {"type": "string"}}},
        }
    },
    responses=responses(
        _403="The caller may not submit workflows in the team.",
        _413="The file is larger than the server accepts.",
        _422="The file cannot be read: `detail` and `problems` say where and why.",
    ),
)
async def submit_workflow(
    request: Request,
    who: Who,
    change: Annotated[Change, audit(Audited.WORKFLOW_SUBMIT)],
    workflows: WorkflowsDep,
    settings: SettingsDep,
    param: Params = [],  # noqa: B006 (FastAPI copies defaults)
    team: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    tree: Annotated[
        str | None,
        Query(pattern=DIGEST.pattern, description="The workflow's folder, sent before."),
    ] = None,
    filename: Annotated[str, Query(max_length=255)] = "<request>",
    run: Annotated[
        bool, Query(description="Start a run now (a workflow without a schedule).")
    ] = True,
) -> WorkflowSubmitted:
    """Store a workflow of the team (replacing the one of its name, whose runs stay);
    without a schedule, start a run of it at once."""
    body.check_media_type(request)
    text = body.decode(await body.read_limited(request, settings.max_body), filename)
    change.team = chosen = workflows.team_for(who.caller, team)
    submitted = await run_in_threadpool(
        workflows.submit, who.caller, chosen, text, filename, tree, _values(param), run
    )
    change.target = submitted.workflow.name
    change.detail = f"run {submitted.run.id}" if submitted.run else "stored"
    return submitted


@router.get("/workflows")
def find_workflows(
    who: Who,
    workflows: WorkflowsDep,
    team: Annotated[str | None, Query(max_length=200)] = None,
) -> list[WorkflowSummary]:
    """The workflows of the caller's teams (every team's, for an administrator), each with
    its schedule, next time and latest run."""
    return workflows.find(who.caller, team)


@router.get("/workflows/{team}/{name}")
def describe_workflow(team: Name, name: Name, who: Who, workflows: WorkflowsDep) -> WorkflowDetails:
    """A workflow with its schedule, its next run times and its latest runs."""
    return workflows.details(workflows.readable(who.caller, team, name))


@router.post(
    "/workflows/{team}/{name}/runs",
    status_code=201,
    responses=responses(_403="The caller's role does not allow it."),
)
def run_workflow(
    team: Name,
    name: Name,
    who: Who,
    change: Annotated[Change, audit(Audited.WORKFLOW_RUN, "name")],
    workflows: WorkflowsDep,
    param: Params = [],  # noqa: B006
) -> RunRecord:
    """Start a run of a stored workflow now, with these parameters over its defaults."""
    change.team = team
    workflow = workflows.readable(who.caller, team, name, Action.CHANGE_WORKFLOW)
    run = workflows.run(workflow, _values(param))
    change.detail = f"run {run.id}"
    return run


@router.get("/workflows/{team}/{name}/runs")
def list_runs(
    team: Name,
    name: Name,
    who: Who,
    workflows: WorkflowsDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[RunRecord]:
    """A workflow's runs, newest first."""
    workflow = workflows.readable(who.caller, team, name)
    return workflows.store.runs(workflow.id, limit)


@router.post(
    "/workflows/{team}/{name}/pause",
    responses=responses(_403="The caller's role does not allow it.", _409="No schedule."),
)
def pause_workflow(
    team: Name,
    name: Name,
    who: Who,
    change: Annotated[Change, audit(Audited.WORKFLOW_PAUSE, "name")],
    workflows: WorkflowsDep,
) -> WorkflowDetails:
    """Stop firing the workflow's schedule (its running runs go on)."""
    change.team = team
    workflow = workflows.readable(who.caller, team, name, Action.CHANGE_WORKFLOW)
    return workflows.pause(workflow, who.caller.user)


@router.post(
    "/workflows/{team}/{name}/resume",
    responses=responses(_403="The caller's role does not allow it.", _409="No schedule."),
)
def resume_workflow(
    team: Name,
    name: Name,
    who: Who,
    change: Annotated[Change, audit(Audited.WORKFLOW_RESUME, "name")],
    workflows: WorkflowsDep,
) -> WorkflowDetails:
    """Fire the workflow's schedule again, from its next time (none missed is caught up)."""
    change.team = team
    workflow = workflows.readable(who.caller, team, name, Action.CHANGE_WORKFLOW)
    return workflows.resume(workflow)


@router.delete(
    "/workflows/{team}/{name}",
    status_code=204,
    response_class=Response,
    responses=responses(_403="The caller's role does not allow it."),
)
def delete_workflow(
    team: Name,
    name: Name,
    who: Who,
    change: Annotated[Change, audit(Audited.WORKFLOW_DELETE, "name")],
    workflows: WorkflowsDep,
) -> None:
    """Stop the workflow's runs and forget it, its schedule and its runs (the steps'
    jobs stay, as jobs)."""
    change.team = team
    workflow = workflows.readable(who.caller, team, name, Action.DELETE_WORKFLOW)
    workflows.delete(workflow, who.caller.user)


@router.get("/workflow-runs/{run_id}")
def describe_run(run_id: RunId, who: Who, workflows: WorkflowsDep) -> RunDetails:
    """A run with each of its steps (state, tries and jobs), the steps each needs
    (`graph`), and what the caller may do to it (`may`: `stop`, `retry`)."""
    return workflows.run_details(workflows.readable_run(who.caller, run_id), who.caller)


@router.post(
    "/workflow-runs/{run_id}/stop",
    responses=responses(_403="The caller's role does not allow it."),
)
def stop_run(
    run_id: RunId,
    who: Who,
    change: Annotated[Change, audit(Audited.RUN_STOP, "run_id")],
    workflows: WorkflowsDep,
) -> RunDetails:
    """Stop a run and its steps' jobs (an ended run stays as it is)."""
    run = workflows.readable_run(who.caller, run_id, Action.CHANGE_WORKFLOW)
    change.team = run.team
    return workflows.stop(run, who.caller.user)


@router.post(
    "/workflow-runs/{run_id}/retry",
    responses=responses(_403="The caller's role does not allow it.", _409="The run has not ended."),
)
def retry_run(
    run_id: RunId,
    who: Who,
    change: Annotated[Change, audit(Audited.RUN_RETRY, "run_id")],
    workflows: WorkflowsDep,
    start_from: Annotated[
        str | None,
        Query(alias="from", pattern=NAME_PATTERN, description="Run this step and all after it."),
    ] = None,
) -> RunDetails:
    """Run again the steps that did not succeed and those they held back (or `from` a
    step: it and every step after it)."""
    run = workflows.readable_run(who.caller, run_id, Action.CHANGE_WORKFLOW)
    change.team = run.team
    change.detail = f"from {start_from}" if start_from else "failed steps"
    return workflows.retry(run, start_from)
