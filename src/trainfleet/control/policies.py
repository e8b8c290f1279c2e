"""The job's rules as pure functions: exit codes, restarts, success and failure."""

from __future__ import annotations

import signal
from collections.abc import Mapping

from trainfleet.domain.conditions import Code
from trainfleet.domain.records import State
from trainfleet.scheduling.placement import TaskKey, task_keys
from trainfleet.spec.models import JobSpec, RestartPolicy


def exit_code(returncode: int) -> int:
    """A process's exit status as a shell reports it: killed by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(code: int) -> str:
    """``exit code 137 (SIGKILL)``."""
    if code > 128:
        try:
            return f"exit code {code} ({signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exit code {code}"


def retries_failure(policy: RestartPolicy, code: int) -> bool:
    """Whether ``policy`` restarts a task that failed with ``code`` (non-zero).

    >>> retries_failure(RestartPolicy.EXIT_CODE, 137), retries_failure(RestartPolicy.EXIT_CODE, 1)
    (True, False)
    """
    if policy is RestartPolicy.EXIT_CODE:
        return 128 <= code <= 255
    return policy in (RestartPolicy.ON_FAILURE, RestartPolicy.ALWAYS)


def restart_cause(code: int, outside: Code | None, requeue_exit_code: int | None) -> Code:
    """Why a task that ended with ``code`` would start again: what ended it from outside
    (``outside``: a lost node, a preemption, a stall), its program asking to be requeued,
    its program failing, or (``exited``) its program ending well.

    >>> restart_cause(137, Code.NODE_LOST, None), restart_cause(85, None, 85)
    (<Code.NODE_LOST: 'node-lost'>, <Code.REQUEUED: 'requeued'>)
    >>> restart_cause(1, None, 85), restart_cause(0, None, None)
    (<Code.PROGRAM_FAILED: 'program-failed'>, <Code.EXITED: 'exited'>)
    """
    if outside is not None:
        return outside
    if code == 0:
        return Code.EXITED
    return Code.REQUEUED if code == requeue_exit_code else Code.PROGRAM_FAILED


def stop_reason(outcome: tuple[State, Code] | None) -> str:
    """Why the job's tasks are stopped, as ``$TRAINFLEET_STOP_FILE`` says it, given the
    job's decided end and its code (None: the job goes on, restarting them).

    >>> stop_reason((State.QUEUED, Code.PREEMPTED)), stop_reason((State.QUEUED, Code.GPU_UNHEALTHY))
    ('preempted', 'gpu-unhealthy')
    >>> stop_reason((State.FAILED, Code.DEADLINE_EXCEEDED)), stop_reason(None)
    ('time-limit', 'restarting')
    """
    if outcome is None:
        return "restarting"
    state, code = outcome
    if state is State.QUEUED:
        return "gpu-unhealthy" if code is Code.GPU_UNHEALTHY else "preempted"
    if code is Code.DEADLINE_EXCEEDED:
        return "time-limit"
    return {State.CANCELLED: "cancelled", State.SUCCEEDED: "finished"}.get(state, "failed")


def success_tasks(spec: JobSpec) -> list[TaskKey]:
    """The tasks whose success is the job's success.

    ``default``: the chief/master if there is one, else worker 0 when workers are tracked,
    else every tracked task. ``all-workers``: the master (if any) and every worker.
    A list of roles: every task of those roles.
    """
    keys = task_keys(spec)
    master = spec.master_role()
    if spec.success == "default":
        if master:
            return [(master, 0)]
        worker = spec.roles.get("worker")
        if worker is not None and spec.is_tracked("worker"):
            return [("worker", 0)]
        tracked = set(spec.tracked_roles())
        return [key for key in keys if key[0] in tracked]
    roles = {master, "worker"} if spec.success == "all-workers" else set(spec.success)
    return [key for key in keys if key[0] in roles]


def job_outcome(
    spec: JobSpec, states: Mapping[TaskKey, State], reasons: Mapping[TaskKey, str]
) -> tuple[State, str] | None:
    """The job's end given its tasks' states, or None while it goes on.

    Any task that failed for good fails the job, but a service's (its TensorBoard); the
    success tasks all succeeding succeeds it; every tracked task finished without that
    fails it.
    """
    services = spec.service_roles()
    for key, state in states.items():
        if state is State.FAILED and key[0] not in services:
            return State.FAILED, f"{task_name(key)} {reasons.get(key, 'failed')}"
    wanted = success_tasks(spec)
    if wanted and all(states[key] is State.SUCCEEDED for key in wanted):
        names = ", ".join(task_name(key) for key in wanted)
        return State.SUCCEEDED, f"{names} succeeded"
    # A role the success policy names is waited for, even one not tracked by default (ps).
    tracked = set(spec.tracked_roles()) | {role for role, _ in wanted}
    if all(state.is_final for key, state in states.items() if key[0] in tracked):
        return State.FAILED, "every tracked task ended but the success policy was not met"
    return None


def task_name(key: TaskKey) -> str:
    """``worker/1``."""
    return f"{key[0]}/{key[1]}"
