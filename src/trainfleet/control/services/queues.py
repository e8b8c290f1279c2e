"""The queues jobs wait in: read by a team's members, made and changed by its team-admins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainfleet.control.access import Action, Caller
from trainfleet.control.services.ownership import DEFAULT_TEAM, QueueTeams
from trainfleet.domain.errors import Conflict, NotFound
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.spec.models import Resources
from trainfleet.wire import QueueBody, QueueState, WouldStart

NEVER = "unschedulable"
"""``WouldStart.code`` of a job that could never start (it asks for more than exists)."""

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine
    from trainfleet.spec.queues import QueueConfig


class Queues:
    """The queues of ``engine``, each owned by the team ``teams`` says."""

    def __init__(self, engine: Engine, teams: QueueTeams) -> None:
        self.engine = engine
        self.owners = teams

    @classmethod
    def of(cls, engine: Engine) -> Queues:
        """The queues of ``engine``, with owners of their own."""
        return cls(engine, QueueTeams(engine.store.accounts))

    def visible(self, caller: Caller) -> list[QueueState]:
        """The queues of the caller's teams (every queue, for an administrator), by name."""
        states = (
            status.state(self.owners.team_of(status.config.name)) for status in self.engine.queues()
        )
        return [state for state in states if caller.sees(Action.READ_QUEUE, state.team)]

    def every(self) -> list[QueueState]:
        """Every queue of every team, unchecked (for ``/metrics``)."""
        return [
            status.state(self.owners.team_of(status.config.name)) for status in self.engine.queues()
        ]

    def describe(self, caller: Caller, name: str) -> QueueState:
        """One queue, with its running and waiting jobs."""
        for state in self.visible(caller):
            if state.queue.name == name:
                return state
        raise NotFound(f"no queue {name!r}")

    def would_start(self, caller: Caller, name: str, resources: Resources) -> WouldStart:
        """Whether a job of one task needing ``resources`` would start in queue ``name`` now,
        or why not (its waiting code), for a caller who sees the queue."""
        self.describe(caller, name)  # NotFound where the caller does not see it
        try:
            waits = self.engine.would_start(name, resources)
        except Unschedulable as error:
            return WouldStart(starts=False, code=NEVER, message=str(error))
        if waits is None:
            return WouldStart(starts=True, message="it would start now")
        return WouldStart(starts=False, code=waits.code.value, message=waits.message)

    def teams(self) -> dict[str, str]:
        """The team of each stored queue, by name."""
        return self.owners.stored()

    def owner(self, caller: Caller, name: str, asked: str | None) -> str:
        """The team of the queue ``name``: its own if it exists (Conflict if ``asked``
        differs or the caller cannot see it), else ``asked``, else the caller's only team."""
        stored = self.owners.stored()
        if name in stored:
            team = stored[name]
            if not caller.sees(Action.READ_QUEUE, team):
                raise Conflict(f"the queue name {name!r} is taken")
            if asked is not None and asked != team:
                raise Conflict(f"queue {name!r} belongs to team {team!r}: it cannot move")
            return team
        return asked or caller.only_team or DEFAULT_TEAM

    def put(
        self, caller: Caller, name: str, body: QueueBody, team: str | None = None
    ) -> QueueState:
        """Create a queue of ``team`` (by default its ``owner``) or replace its
        configuration, if the caller may; waiting jobs are looked at again."""
        from trainfleet.spec.queues import queue_config

        team = self.owner(caller, name, body.team) if team is None else team
        caller.require(Action.CHANGE_QUEUE, team, missing=f"team: no team {team!r}")
        self.configure(queue_config(name, body.model_dump(exclude={"team"})), team)
        return self.describe(caller, name)

    def configure(self, config: QueueConfig, team: str = DEFAULT_TEAM) -> None:
        """Create or change a queue (``team``: the owner of a new one), unchecked."""
        self.engine.set_queue(config, team)
        self.owners.forget()
