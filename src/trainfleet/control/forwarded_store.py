"""A store whose reads are this process's and whose writes are another's: a server's API
process reads on a read-only connection of its own, and each write runs in the engine's
process, through the door (``control.door``), as a call named ``store.METHOD`` or
``store.PART.METHOD``.

``WRITES`` names every method that writes; a test holds it and ``READS`` to every public
method of the store, so that a new one must be put on a side.
"""

from __future__ import annotations

from typing import Any

from trainfleet.control.door import DoorClient, Forwarded
from trainfleet.store.database import Store

WRITES: dict[str, frozenset[str]] = {
    "": frozenset(
        {
            "add_job",
            "add_jobs",
            "transition",
            "transitions",
            "note",
            "update_job",
            "update_task",
            "place_tasks",
            "delete_job",
            "put_queue",
            "add_token",
            "revoke_token",
        }
    ),
    "accounts": frozenset({"add_user", "disable_user", "add_team", "set_member", "remove_member"}),
    "audit": frozenset({"record", "record_many", "prune"}),
    "secrets": frozenset({"add", "delete", "replace_data"}),
    "workflows": frozenset(
        {"put", "delete", "set_schedule", "add_run", "forget_runs", "update_run", "update_steps"}
    ),
}
"""The methods that write, by the part of the store they are on ("": the store itself)."""
READS: dict[str, frozenset[str]] = {
    "": frozenset(
        {
            "open",
            "target",
            "close",
            "check",
            "get_job",
            "job_with_key",
            "get_jobs",
            "list_jobs",
            "find_jobs",
            "unfinished_jobs",
            "list_tasks",
            "tasks_of",
            "lingering",
            "list_events",
            "events_of",
            "changes",
            "newest_event",
            "count_jobs",
            "count_tasks",
            "count_restarts",
            "list_queues",
            "get_token",
            "token_by_digest",
            "list_tokens",
        }
    ),
    "accounts": frozenset(
        {"get_user", "list_users", "memberships", "get_team", "list_teams", "queue_teams"}
    ),
    "audit": frozenset({"find"}),
    "secrets": frozenset({"get", "list"}),
    "workflows": frozenset(
        {
            "get",
            "find",
            "of_teams",
            "schedules",
            "schedule",
            "schedules_of",
            "latest_runs",
            "get_run",
            "runs",
            "active_runs",
            "steps",
        }
    ),
}
"""The methods that only read, which run in the calling process."""
LOCAL_ONLY = frozenset({"on_job_end", "off_job_end"})
"""Methods that tell this process of its own writes: none are made here, so none are told
(what follows the ends of jobs, the workflows' driver, runs in the engine's process)."""


def door_calls() -> frozenset[str]:
    """The names the engine's door answers for a forwarded store (``store.add_job`` ...)."""
    return frozenset(
        ".".join(filter(None, ("store", part, name)))
        for part, names in WRITES.items()
        for name in names
    )


class _Part:
    """One part of a store: its reads here, its writes through ``door`` as ``prefix.NAME``."""

    def __init__(self, local: object, door: DoorClient, prefix: str, writes: frozenset[str]):
        self._local = local
        self._remote = Forwarded(door, prefix)
        self._writes = writes

    def __getattr__(self, name: str) -> Any:
        if name in self._writes:
            return getattr(self._remote, name)
        if name in LOCAL_ONLY:
            raise AttributeError(f"{name}: a forwarded store is told of no job's end")
        return getattr(self._local, name)


class ForwardedStore(_Part):
    """``local`` (a store opened read-only) for reads; every write through ``door``."""

    def __init__(self, local: Store, door: DoorClient) -> None:
        super().__init__(local, door, "store", WRITES[""])
        self.accounts = _Part(local.accounts, door, "store.accounts", WRITES["accounts"])
        self.audit = _Part(local.audit, door, "store.audit", WRITES["audit"])
        self.secrets = _Part(local.secrets, door, "store.secrets", WRITES["secrets"])
        self.workflows = _Part(local.workflows, door, "store.workflows", WRITES["workflows"])
