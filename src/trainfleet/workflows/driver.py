"""A server's runs of workflows, driven by one thread from what the store keeps.

Every run and step lives in the store, so a server killed at any moment picks its runs
up where they were: a step is written ``starting`` (its try counted) before its job is
submitted, and its job carries the run, the step and the try as labels; a step found
``starting`` is matched to its job by them, or submitted again where there is none.

The store tells the thread of each job that ends (``Store.on_job_end``): a step's job
that ends moves its run on at once (the hand-off), and every run is looked at again each
``RECONCILE`` seconds beside it (a job another process ended). Idle, it sleeps.
Stops and retries are asked of the thread (``request``), so that one thread alone
changes a run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trainfleet.domain.errors import NotFound, TrainfleetError
from trainfleet.domain.records import State
from trainfleet.domain.workflow_records import RunCode, RunRecord, RunState, StepState
from trainfleet.spec.errors import SpecError
from trainfleet.spec.models import JobSpec
from trainfleet.spec.workflows import WorkflowSpec, stored_workflow
from trainfleet.store.connection import patiently
from trainfleet.store.database import Store
from trainfleet.workflows.plan import RunPlan
from trainfleet.workflows.steps import step_job

log = logging.getLogger("trainfleet.workflows")

RECONCILE = 2.0
"""Seconds between two looks at every active run, whatever the store said."""
RETRY_FIRST, RETRY_MAX = 0.1, 5.0
RUN_LABEL, TRY_LABEL = "trainfleet/run", "trainfleet/try"
FOLDERS_KEPT = 20
"""Runs of a workflow whose folders are kept, the newest: an older one's goes when a run
ends (it can no longer be retried)."""
RUNS_KEPT = 1000
"""Runs of a workflow kept in the store, the newest: older ones are forgotten."""


class StepJobs(Protocol):
    """Where a server's steps run: its engine, as each run's owner."""

    def submit(self, run: RunRecord, spec: JobSpec) -> str:
        """Store and start a step's job as the run's owner, in the run's folder copy; its
        id. TrainfleetError where the owner may not (disabled, no longer in the team)."""
        ...

    def state(self, job_id: str) -> tuple[State, str] | None:
        """The job's state and reason; None where it is gone."""
        ...

    def cancel(self, job_id: str, reason: str) -> None: ...

    def find(self, labels: Mapping[str, str]) -> str | None:
        """The job with these labels, if one was stored."""
        ...

    def folder(self, run: RunRecord) -> Path:
        """Where the run's step files are read (its tree's stored copy)."""
        ...

    def run_dir(self, run: RunRecord) -> Path:
        """The run's shared folder, made (and given to the team's account) if need be."""
        ...

    def remove_run_dir(self, run_id: str) -> None:
        """Remove a run's folder, following no link in it."""
        ...


@dataclass(frozen=True)
class Request:
    """A change asked of the driver's thread."""

    run_id: str
    action: str
    """``stop`` or ``retry``."""
    reason: str = ""
    code: str = RunCode.STOPPED
    start_from: str | None = None


class RunDriver:
    """Drives every active run of ``store`` on a daemon thread."""

    def __init__(self, store: Store, jobs: StepJobs, clock: Callable[[], float] = time.time):
        self.store = store
        self.jobs = jobs
        self.clock = clock
        self._wanted = threading.Event()
        """Set when the thread has something to do; ``_all``: look at every run."""
        self._all = True
        self._ended: set[str] = set()  # jobs that ended since the thread last looked
        self._requests: list[tuple[Request, Future[RunRecord]]] = []
        self._lock = threading.Lock()
        self._active: set[str] = set()  # the runs it has advanced and not seen end
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._patiently, name="workflows", daemon=True)
        store.on_job_end(self._job_ended)
        self._thread.start()

    def wake(self) -> None:
        """Look at every active run now (one was stored)."""
        with self._lock:
            self._all = True
        self._wanted.set()

    def _job_ended(self, job_id: str) -> None:
        with self._lock:
            self._ended.add(job_id)
        self._wanted.set()

    def request(self, request: Request) -> Future[RunRecord]:
        """Have the thread stop or retry a run; the future holds the run as it is after."""
        future: Future[RunRecord] = Future()
        with self._lock:
            self._requests.append((request, future))
        self._wanted.set()
        return future

    def close(self) -> None:
        self.store.off_job_end(self._job_ended)
        self._stopping.set()
        self._wanted.set()
        self._thread.join(timeout=10)

    # -- the thread ----------------------------------------------------------------

    def _patiently(self) -> None:
        with patiently():  # a pass waits out a store outage
            self._loop()

    def _loop(self) -> None:
        watched: dict[str, str] = {}  # a running step's job: its run
        next_all, retry, failing = 0.0, RETRY_FIRST, False
        while not self._stopping.is_set():
            self._wanted.wait(max(0.0, next_all - time.monotonic()))
            self._wanted.clear()
            with self._lock:
                every, ended = self._all or time.monotonic() >= next_all, self._ended
                self._all, self._ended = False, set()
            try:
                self._answer_requests()
                due = {watched[job] for job in ended if job in watched}
                if every:
                    next_all = time.monotonic() + RECONCILE
                    due |= {run.id for run in self.store.workflows.active_runs()}
                for run_id in sorted(due):
                    for job in self._advance(run_id):
                        watched[job] = run_id
                watched = {job: run for job, run in watched.items() if run in self._active}
            except Exception:
                if not failing:
                    log.exception("driving workflow runs failed; retrying until it succeeds")
                failing = True
                self._stopping.wait(retry)
                retry = min(retry * 2, RETRY_MAX)
                self.wake()
                continue
            if failing:
                log.warning("driving workflow runs succeeds again")
            failing, retry = False, RETRY_FIRST

    def _answer_requests(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        for request, future in requests:
            try:
                future.set_result(self._apply(request))
            except Exception as error:
                future.set_exception(error)

    # -- one run -------------------------------------------------------------------

    def _spec(self, run: RunRecord) -> WorkflowSpec:
        self._active.add(run.id)
        return stored_workflow(run.source, run.filename)

    def _advance(self, run_id: str) -> list[str]:
        """Move one run on as far as its steps' jobs allow; the jobs it now waits for."""
        run = self.store.workflows.get_run(run_id)
        if run is None or RunState(run.state).is_final:
            self._active.discard(run_id)
            return []
        try:
            spec = self._spec(run)
        except SpecError as error:  # stored by a newer trainfleet, or damaged
            self._end(
                run, RunState.FAILED, RunCode.STEP_FAILED, f"its file cannot be read: {error}"
            )
            return []
        now = self.clock()
        if run.state == RunState.WAITING:
            self.store.workflows.update_run(run.id, state=RunState.RUNNING, started_at=now)
        plan, jobs, changes = self._plan(run, spec)
        actions = plan.next()
        for name in actions.skip:
            changes.setdefault(name, {})["state"] = StepState.SKIPPED
        for name in actions.stop:
            job = jobs[name][-1]
            self.jobs.cancel(job, "a step of the workflow failed (on_failure: cancel-all)")
        self.store.workflows.update_steps(run.id, changes)
        self._start(run, spec, plan, actions.start, jobs)
        if plan.done:
            broken = sorted(
                (
                    n
                    for n in plan.order
                    if plan.states[n] in (StepState.FAILED, StepState.CANCELLED)
                ),
                key=lambda n: plan.states[n] != StepState.FAILED,  # a failure first
            )
            if broken:
                why = f"step {broken[0]} {plan.states[broken[0]]}"
                self._end(run, RunState.FAILED, RunCode.STEP_FAILED, why)
            else:
                self._end(run, RunState.SUCCEEDED, RunCode.SUCCEEDED, "")
            return []
        return [jobs[n][-1] for n in plan.order if plan.states[n] == StepState.RUNNING]

    def _plan(
        self, run: RunRecord, spec: WorkflowSpec
    ) -> tuple[RunPlan, dict[str, list[str]], dict[str, dict[str, Any]]]:
        """The run's plan from its stored steps, with the ends of their jobs since: the
        plan, each step's jobs, and the changes to store."""
        steps = self.store.workflows.steps(run.id)
        states = {s.step: StepState(s.state) for s in steps}
        plan = RunPlan(spec, states, {s.step: s.tries for s in steps})
        jobs = {s.step: list(s.jobs) for s in steps}
        changes: dict[str, dict[str, Any]] = {}
        for step in steps:
            if step.state == StepState.STARTING:  # a server stopped while it submitted
                labels = {
                    RUN_LABEL: run.id,
                    "trainfleet/step": step.step,
                    TRY_LABEL: str(step.tries),
                }
                found = self.jobs.find(labels)
                if found is None:
                    plan.states[step.step] = StepState.WAITING
                    plan.tries[step.step] -= 1
                    changes[step.step] = {"state": StepState.WAITING, "tries": step.tries - 1}
                    continue
                jobs[step.step].append(found)
                plan.states[step.step] = StepState.RUNNING
                changes[step.step] = {"state": StepState.RUNNING, "jobs": jobs[step.step]}
            if plan.states[step.step] != StepState.RUNNING:
                continue
            seen = self.jobs.state(jobs[step.step][-1])
            if seen is None or seen[0].is_final:
                state, reason = seen if seen is not None else (State.FAILED, "its job was deleted")
                plan.ended(
                    step.step,
                    succeeded=state == State.SUCCEEDED,
                    stopped=state == State.CANCELLED,
                )
                changes[step.step] = {
                    **changes.get(step.step, {}),
                    "state": plan.states[step.step],
                    "reason": reason,
                    "finished_at": self.clock(),
                }
        return plan, jobs, changes

    def _start(
        self,
        run: RunRecord,
        spec: WorkflowSpec,
        plan: RunPlan,
        names: list[str],
        jobs: dict[str, list[str]],
    ) -> None:
        """Submit the steps' jobs, each step written ``starting`` before any is submitted
        and ``running`` (or failed: refused) after all were (two writes in all)."""
        if not names:
            return
        for name in names:
            plan.started(name)
        write = self.store.workflows.update_steps
        write(run.id, {n: {"state": StepState.STARTING, "tries": plan.tries[n]} for n in names})
        done: dict[str, dict[str, Any]] = {}
        for name in names:
            try:
                run_dir = self.jobs.run_dir(run)
                folder = self.jobs.folder(run)
                job = step_job(spec, name, folder, run.parameters, str(run_dir), run.filename)
                labels = {**job.labels, RUN_LABEL: run.id, TRY_LABEL: str(plan.tries[name])}
                job_id = self.jobs.submit(run, job.model_copy(update={"labels": labels}))
            except TrainfleetError as error:  # refused: a try that failed, saying why
                plan.ended(name, succeeded=False)
                done[name] = {
                    "state": plan.states[name],
                    "reason": str(error),
                    "finished_at": self.clock(),
                }
                self.wake()  # what follows from it, at once (no job's end will say)
                continue
            jobs[name].append(job_id)
            done[name] = {
                "state": StepState.RUNNING,
                "jobs": jobs[name],
                "started_at": self.clock(),
            }
        write(run.id, done)

    def _end(self, run: RunRecord, state: RunState, code: str, reason: str) -> None:
        self.store.workflows.update_run(
            run.id, state=state, code=code, reason=reason, finished_at=self.clock()
        )
        self._active.discard(run.id)
        log.info("workflow run %s %s%s", run.id, state, f": {reason}" if reason else "")
        self._prune(run.workflow_id)

    def _prune(self, workflow_id: str) -> None:
        """Remove the folders of the workflow's ended runs older than the FOLDERS_KEPT
        newest, and forget its runs older than the RUNS_KEPT newest."""
        workflows = self.store.workflows
        for old in workflows.runs(workflow_id, RUNS_KEPT, skip=FOLDERS_KEPT):
            if RunState(old.state).is_final:
                self.jobs.remove_run_dir(old.id)
        forgotten = workflows.runs(workflow_id, RUNS_KEPT, skip=RUNS_KEPT)
        workflows.forget_runs([old.id for old in forgotten if RunState(old.state).is_final])

    # -- stops and retries ----------------------------------------------------------

    def _apply(self, request: Request) -> RunRecord:
        run = self.store.workflows.get_run(request.run_id)
        if run is None:
            raise NotFound(f"no workflow run {request.run_id!r}")
        if request.action == "stop":
            self._stop(run, request)
        elif request.action == "retry":
            self._retry(run, request.start_from)
        stored = self.store.workflows.get_run(run.id)
        assert stored is not None
        return stored

    def _stop(self, run: RunRecord, request: Request) -> None:
        if RunState(run.state).is_final:
            return
        changes: dict[str, dict[str, Any]] = {}
        for step in self.store.workflows.steps(run.id):
            if StepState(step.state).is_final:
                continue
            if step.job_id is not None and step.state != StepState.WAITING:
                self.jobs.cancel(step.job_id, request.reason)
            changes[step.step] = {"state": StepState.CANCELLED, "finished_at": self.clock()}
        self.store.workflows.update_steps(run.id, changes)
        self._end(run, RunState.CANCELLED, request.code, request.reason)

    def _retry(self, run: RunRecord, start_from: str | None) -> None:
        """Run again what failed and what it held back (or ``start_from`` and every step
        after it): those steps wait again, their tries counted afresh."""
        spec = stored_workflow(run.source, run.filename)
        steps = self.store.workflows.steps(run.id)
        if start_from is not None:
            again = after(spec, start_from)
        else:
            again = {s.step for s in steps if s.state != StepState.SUCCEEDED}
        changes = {
            name: {"state": StepState.WAITING, "tries": 0, "reason": "", "finished_at": None}
            for name in again
        }
        self.store.workflows.update_steps(run.id, changes)
        self.store.workflows.update_run(
            run.id,
            state=RunState.RUNNING,
            code=RunCode.RETRIED,
            reason="",
            retries=run.retries + 1,
            finished_at=None,
        )
        self.wake()


def after(spec: WorkflowSpec, step: str) -> set[str]:
    """``step`` and every step that needs it, directly or not."""
    found, changed = {step}, True
    while changed:
        changed = False
        for name, other in spec.steps.items():
            if name not in found and found.intersection(other.needs):
                found.add(name)
                changed = True
    return found
