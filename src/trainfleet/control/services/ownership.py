"""Which team owns what a request names, the one place that decides it.

A job belongs to the team of the queue it waits in, and to the user who submitted it.
A queue belongs to the team that made it; ``default`` and queues never configured belong
to the team ``default``. A job directory sent to a server (a tree) belongs to the teams
its sender may submit jobs in, or to the administrators. Whether a caller may act on what
a team owns is ``access.RULES``'.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from cachetools import TTLCache

from trainfleet.control.access import Action, Caller
from trainfleet.domain.errors import BadInput
from trainfleet.domain.records import JobRecord
from trainfleet.workdirs.store import owner

if TYPE_CHECKING:
    from trainfleet.spec.models import JobSpec
    from trainfleet.store.accounts import Accounts as StoredAccounts

DEFAULT_TEAM = "default"
QUEUE_CACHE_SECONDS = 2.0
"""How long the queues' teams are trusted without asking the store: submissions ask for
each job, and queues change rarely (this process's own changes clear it at once)."""


def allowed_job(caller: Caller, job: JobRecord, action: Action) -> JobRecord:
    """``job``, if the caller may do ``action`` to it: NotFound where it cannot see it (as
    for a job that does not exist), Forbidden where it sees it but may not."""
    caller.require(action, job.team, job.user, missing=f"no job {job.id!r}")
    return job


def tree_owner(caller: Caller, team: str) -> str:
    """Whose trees a job of ``team`` submitted by the caller may run in: the team's, or
    the administrators' for an administrator."""
    return owner(None if caller.admin else team)


def tree_owners(caller: Caller) -> list[str]:
    """Whose trees the caller sends: each team's it may submit jobs in, or the
    administrators'; Forbidden where it may submit nowhere."""
    if caller.admin:
        return [owner(None)]
    return [owner(team) for team in caller.teams_allowed(Action.SUBMIT_JOB) or ()]


class QueueTeams:
    """The team of every queue, cached briefly."""

    def __init__(self, accounts: StoredAccounts) -> None:
        self.accounts = accounts
        self._cache: TTLCache[str, dict[str, str]] = TTLCache(maxsize=1, ttl=QUEUE_CACHE_SECONDS)
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Read the store again next time (a queue or team was just made here)."""
        with self._lock:
            self._cache.clear()

    def stored(self) -> dict[str, str]:
        """The team of each stored queue, by name."""
        with self._lock:
            teams = self._cache.get("all")
            if teams is None:
                teams = self._cache["all"] = self.accounts.queue_teams()
            return teams

    def team_of(self, queue: str) -> str:
        return self.stored().get(queue, DEFAULT_TEAM)

    def for_submission(self, caller: Caller, spec: JobSpec) -> tuple[JobSpec, str]:
        """The job as it will wait, and its team: the queue it names, if the caller may
        submit there. A job left in ``default`` by a user of one team other than
        ``default`` goes to that team's default queue."""
        team = self.team_of(spec.queue)
        if not caller.sees(Action.SUBMIT_JOB, team) and spec.queue == DEFAULT_TEAM:
            spec, team = self._own_default(caller, spec)
        if not caller.sees(Action.SUBMIT_JOB, team):
            raise BadInput(f"queue: no queue {spec.queue!r}{self._yours(caller)}")
        caller.require(Action.SUBMIT_JOB, team)
        return spec, team

    def _own_default(self, caller: Caller, spec: JobSpec) -> tuple[JobSpec, str]:
        team = caller.only_team
        if team is None:
            return spec, DEFAULT_TEAM
        record = self.accounts.get_team(team)
        if record is None:
            return spec, DEFAULT_TEAM
        return spec.model_copy(update={"queue": record.default_queue}), team

    def _yours(self, caller: Caller) -> str:
        mine = sorted(q for q, t in self.stored().items() if caller.sees(Action.SUBMIT_JOB, t))
        return f" (your teams' queues: {', '.join(mine)})" if mine else " (you are in no team)"
