"""One run of a workflow, driven from this process: each step submitted as a job when
``RunPlan`` says, followed until the run is over (``trainfleet workflow run FILE``).

Every step's job is built (its file read, the parameters put in, the whole validated)
before any starts, so a bad step file fails the run before a job exists; what can only
fail as a job is submitted fails that step alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trainfleet.domain.errors import TrainfleetError
from trainfleet.domain.records import JobRecord, State
from trainfleet.spec.models import JobSpec
from trainfleet.spec.workflows import WorkflowSpec
from trainfleet.workflows.plan import RunPlan, StepState
from trainfleet.workflows.steps import step_job

POLL = 0.1
"""Seconds between two looks at the running steps' jobs."""


class JobHost(Protocol):
    """Where the steps' jobs run: this machine's engine, or a server."""

    def submit_step(self, spec: JobSpec, folder: Path) -> str:
        """Store and start the job, run in ``folder``; its id."""
        ...

    def get(self, job_id: str) -> JobRecord: ...

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord: ...


@dataclass
class RunOutcome:
    """How a run ended: each step's state and its jobs (one per try)."""

    states: dict[str, StepState]
    jobs: dict[str, list[str]] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return not any(s in (StepState.FAILED, StepState.CANCELLED) for s in self.states.values())


def step_jobs(
    spec: WorkflowSpec, folder: Path, parameters: Mapping[str, Any], run_dir: Path
) -> dict[str, JobSpec]:
    """Every step's job, in the run's order, built from ``folder`` with ``parameters`` and
    the run's folder ``run_dir``; SpecError (file, line, field) for the first that cannot
    be, before anything has started."""
    return {name: step_job(spec, name, folder, parameters, str(run_dir)) for name in spec.order()}


def run_workflow(
    host: JobHost,
    spec: WorkflowSpec,
    jobs: Mapping[str, JobSpec],
    folder: Path,
    run_dir: Path,
    say: Callable[[str], None] = print,
) -> RunOutcome:
    """Run every step of ``spec`` that its states call for, each step's job of ``jobs``
    (``step_jobs``) in ``folder``, the run's folder ``run_dir``; each change is said. A
    step whose job the host refuses fails (and retries, where it may). Ctrl-C stops the
    running steps' jobs."""
    plan = RunPlan(spec)
    running: dict[str, str] = {}  # step: its job
    stopping: set[str] = set()
    outcome = RunOutcome(plan.states, {name: [] for name in plan.order})
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        while not plan.done:
            actions = plan.next()
            for name in actions.skip:
                say(f"step {name} skipped")
            for name in set(actions.stop) - stopping:
                stopping.add(name)
                host.cancel(running[name], "a step of the workflow failed (on_failure: cancel-all)")
            for name in actions.start:
                plan.started(name)
                try:
                    job_id = host.submit_step(jobs[name], folder)
                except TrainfleetError as error:
                    plan.ended(name, succeeded=False)
                    say(_ended(spec, plan, name, f"failed: its job was refused: {error}"))
                    continue
                running[name] = job_id
                outcome.jobs[name].append(job_id)
                say(f"step {name} started: job {job_id}")
            for name, job_id in list(running.items()):
                record = host.get(job_id)
                if not State(record.state).is_final:
                    continue
                del running[name]
                stopped = record.state == State.CANCELLED
                plan.ended(name, succeeded=record.state == State.SUCCEEDED, stopped=stopped)
                reason = f": {record.reason}" if record.reason else ""
                say(_ended(spec, plan, name, f"{record.state}{reason}"))
            if not plan.done and not actions.start:
                time.sleep(POLL)
    except KeyboardInterrupt:
        for job_id in running.values():
            host.cancel(job_id, "the workflow run was interrupted")
        raise
    return outcome


def _ended(spec: WorkflowSpec, plan: RunPlan, name: str, how: str) -> str:
    """``step NAME <how>``, with the retry it goes on to, if any."""
    said = f"step {name} {how}"
    if plan.states[name] == StepState.WAITING:
        said += f" (retry {plan.tries[name]} of {spec.steps[name].retries})"
    return said
