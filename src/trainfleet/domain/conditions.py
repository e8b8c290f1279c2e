"""Conditions: why a job or a task is where it is, as a code for programs and a message
for people.

Every state change of a job or a task is stored with a ``Condition``: its ``code`` (one of
``Code``, the table of docs/conditions.md) and its message (``lost: the trainfleet process
running it ended (pid 42)``). A job keeps two: the condition of its latest state change
(``code``/``reason``) and, while it does not run yet, why it waits (``waiting_code``/
``waiting``). Programs read the code; the message is only ever shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    """Why a job or a task is in its state (see docs/conditions.md for the table)."""

    # Why a job waits (its waiting_code)
    WAITING_FOR_ADMISSION = "waiting-for-admission"
    """Stored, not yet looked at by a scheduling pass."""
    WAITING_FOR_TURN = "waiting-for-turn"
    """Jobs ahead of it in its queue go first."""
    WAITING_FOR_QUOTA = "waiting-for-quota"
    """Its queue's quota (and what it may borrow) is used up."""
    WAITING_FOR_RESOURCES = "waiting-for-resources"
    """Not enough CPUs, memory or GPUs are free (here or held by other processes' jobs)."""
    WAITING_FOR_PREEMPTION = "waiting-for-preemption"
    """Jobs it preempted are still stopping."""
    WAITING_FOR_ENVIRONMENT = "waiting-for-environment"
    """Admitted: its Python environments are being built (or found in the cache)."""

    # The life of a job or task (its code, and its events')
    SUBMITTED = "submitted"
    ADMITTED = "admitted"
    """A job: given its resources, its controller starts it."""
    STARTED = "started"
    """A task: its process (or cluster job) started; a job: all its tasks run."""
    ADOPTED = "adopted"
    """A task: found running by a restarted server, which follows it again."""
    EXITED = "exited"
    """A task's process ended by itself; its exit code says how."""
    RESTARTING = "restarting"
    """A task (or, for a task, the whole job) waits to start again after an exit."""
    PREEMPTED = "preempted"
    """Stopped to make room for another job and queued again."""
    NODE_LOST = "node-lost"
    """Ended from outside by its cluster engine: its node failed, or its allocation is
    gone or timed out (the message says which); restarted by default (an infrastructure
    failure)."""
    PROGRAM_FAILED = "program-failed"
    """A task restarts after its program failed (``restart.policy``, ``max_restarts``)."""
    STALLED = "stalled"
    """A task restarts: its log and heartbeat stayed silent past ``progress.timeout``."""
    REQUEUED = "requeued"
    """A task restarts: its program asked to, exiting with ``restart.requeue_exit_code``."""
    RENDEZVOUS_LOST = "rendezvous-lost"
    """The rendezvous store trainfleet runs for an elastic PyTorch group was killed while
    the group trained: the whole job restarts with a new store (an infrastructure failure)."""
    GPU_SHARING_LOST = "gpu-sharing-lost"
    """Ended while the MPS daemon that enforced its share of a GPU was gone (it died);
    the daemon is started again for the next start (restarted by policy)."""
    GPU_UNHEALTHY = "gpu-unhealthy"
    """A job put back in its queue because a GPU its tasks held turned unhealthy (lost, ECC
    errors): it starts again on healthy GPUs; that one gets no task until it is well."""
    REGROUPED = "regrouped"
    """An elastic PyTorch group completed a round of its rendezvous: the message says its
    world size and members (a job's event, one per round)."""
    CANCELLED = "cancelled"
    """Stopped by a user (``trainfleet stop``, a delete, the cluster's own cancel) or by a
    server shutting down."""
    SUCCEEDED = "succeeded"
    """A job: its success policy is met."""
    FAILED = "failed"
    """A job: its tracked tasks ended without meeting the success policy."""
    DELETED = "deleted"
    """A job: forgotten with its tasks, events and logs (its last event; the change feed's)."""

    # Why a job or task ended where no exit says it (also the messages' first words)
    ENVIRONMENT_BUILD_FAILED = "environment-build-failed"
    COULD_NOT_START = "could-not-start"
    NO_FREE_PORT = "no-free-port"
    DEADLINE_EXCEEDED = "deadline-exceeded"
    DISK_FULL = "disk-full"
    LOST = "lost"
    """The trainfleet process that ran it ended."""
    ADMISSION_FAILED = "admission-failed"
    NOT_STARTED = "not-started"
    """A task: its job ended before it started."""
    STOPPED = "stopped"
    """A task: stopped because its job ended."""
    INTERNAL_ERROR = "internal-error"
    """A fault of trainfleet's own (a bug, a file it could not write)."""


@dataclass(frozen=True, slots=True)
class Condition:
    """A code and the message that says it to people."""

    code: Code
    message: str = ""


def known(code: str) -> Code | str:
    """``code`` as a Code where this trainfleet knows it (a newer server's still reads)."""
    try:
        return Code(code)
    except ValueError:
        return code


INFRASTRUCTURE_FAILURES = frozenset(
    {Code.NODE_LOST, Code.PREEMPTED, Code.STALLED, Code.REQUEUED, Code.RENDEZVOUS_LOST}
)
"""Why a task restarts without its program failing: restarted by default, up to
``restart.max_infrastructure``, counted apart from its program's failures."""
