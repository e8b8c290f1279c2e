"""Who may do what: one table of rules, read by every check of the server.

A user is an administrator (everything) or has a role in each of its teams (see
``TeamRole``). Each action on a team's object (a job, a queue, the team itself) needs a
role in that team, sometimes a lower one on what the caller owns itself. An object of a
team the caller is not in does not exist for it (404, left out of lists); one it sees
but may not change is refused with 403 naming the role needed. Actions that belong to no
team (users, teams, metrics) are for administrators alone.

>>> lead = Caller("ana", admin=False, teams={"vision": TeamRole.TEAM_ADMIN})
>>> lead.decide(Action.STOP_JOB, "vision", owner="bo").allowed
True
>>> Caller("bo", False, {"vision": TeamRole.MEMBER}).decide(Action.STOP_JOB, "vision", "ana")
Decision(visible=True, allowed=False, needed=<TeamRole.TEAM_ADMIN: 'team-admin'>)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from trainfleet.domain.errors import Forbidden, NotFound
from trainfleet.domain.records import TeamRole


class Action(StrEnum):
    """What a caller asks to do, said as the refusal says it."""

    READ_JOB = "reading jobs"
    SUBMIT_JOB = "submitting jobs"
    STOP_JOB = "stopping jobs"
    DELETE_JOB = "deleting jobs"
    READ_QUEUE = "reading queues"
    CHANGE_QUEUE = "changing queues"
    READ_TEAM = "reading teams"
    CHANGE_MEMBERS = "changing members"
    READ_SECRETS = "listing secrets"
    CREATE_SECRET = "creating secrets"
    DELETE_SECRET = "deleting secrets"
    MANAGE_TEAMS = "creating teams"
    MANAGE_USERS = "managing users"
    READ_METRICS = "reading metrics"
    READ_AUDIT = "reading the audit trail"
    OPEN_NOTEBOOK = "opening notebooks"
    CLEAR_GPU = "clearing GPUs"
    READ_WORKFLOW = "reading workflows"
    SUBMIT_WORKFLOW = "submitting workflows"
    CHANGE_WORKFLOW = "changing workflows"
    """Running, pausing, resuming, stopping and retrying a workflow's runs."""
    DELETE_WORKFLOW = "deleting workflows"


@dataclass(frozen=True)
class Rule:
    """The role an action needs in the object's team; ``own``: the role enough on the
    caller's own objects. ``team`` None: an action for administrators alone, or, with
    ``own``, for the object's owner (and administrators)."""

    team: TeamRole | None
    own: TeamRole | None = None


RULES: Mapping[Action, Rule] = {
    Action.READ_JOB: Rule(TeamRole.VIEWER),
    Action.SUBMIT_JOB: Rule(TeamRole.MEMBER),
    Action.STOP_JOB: Rule(TeamRole.TEAM_ADMIN, own=TeamRole.MEMBER),
    Action.DELETE_JOB: Rule(TeamRole.TEAM_ADMIN, own=TeamRole.MEMBER),
    Action.READ_QUEUE: Rule(TeamRole.VIEWER),
    Action.CHANGE_QUEUE: Rule(TeamRole.TEAM_ADMIN),
    Action.READ_TEAM: Rule(TeamRole.VIEWER),
    Action.CHANGE_MEMBERS: Rule(TeamRole.TEAM_ADMIN),
    Action.READ_SECRETS: Rule(TeamRole.MEMBER),
    Action.CREATE_SECRET: Rule(TeamRole.MEMBER),
    Action.DELETE_SECRET: Rule(TeamRole.TEAM_ADMIN, own=TeamRole.MEMBER),
    Action.MANAGE_TEAMS: Rule(None),
    Action.MANAGE_USERS: Rule(None),
    Action.READ_METRICS: Rule(None),
    Action.READ_AUDIT: Rule(TeamRole.TEAM_ADMIN),
    Action.OPEN_NOTEBOOK: Rule(None, own=TeamRole.MEMBER),
    Action.CLEAR_GPU: Rule(None),
    Action.READ_WORKFLOW: Rule(TeamRole.VIEWER),
    Action.SUBMIT_WORKFLOW: Rule(TeamRole.MEMBER),
    Action.CHANGE_WORKFLOW: Rule(TeamRole.TEAM_ADMIN, own=TeamRole.MEMBER),
    Action.DELETE_WORKFLOW: Rule(TeamRole.TEAM_ADMIN, own=TeamRole.MEMBER),
}
"""The one table every check reads (and ``tests/server/test_access_rules.py`` walks)."""


@dataclass(frozen=True)
class Decision:
    """Whether the object exists for the caller, whether the action is allowed, and the
    role it would need where it is not."""

    visible: bool
    allowed: bool
    needed: TeamRole | None = None


@dataclass(frozen=True)
class Caller:
    """A user as the checks see it: its name, whether it is an administrator, its roles."""

    user: str
    admin: bool = False
    teams: Mapping[str, TeamRole] = field(default_factory=dict)

    def decide(self, action: Action, team: str | None = None, owner: str | None = None) -> Decision:
        """What RULES say of ``action`` on an object of ``team`` owned by ``owner``."""
        if self.admin:
            return Decision(visible=True, allowed=True)
        rule = RULES[action]
        if rule.team is None and rule.own is None:
            return Decision(visible=True, allowed=False)
        role = self.teams.get(team) if team is not None else None
        if role is None:
            return Decision(visible=False, allowed=False)
        needed = rule.own if rule.own is not None and owner == self.user else rule.team
        if needed is None:  # another's object of an owner-only action
            return Decision(visible=True, allowed=False)
        return Decision(visible=True, allowed=role.allows(needed), needed=needed)

    def require(
        self,
        action: Action,
        team: str | None = None,
        owner: str | None = None,
        missing: str = "not found",
    ) -> None:
        """Raise NotFound(``missing``) where the object does not exist for the caller,
        Forbidden where the action is not allowed."""
        decision = self.decide(action, team, owner)
        if not decision.visible:
            raise NotFound(missing)
        if not decision.allowed:
            raise Forbidden(self.refusal(action, team, owner, decision))

    def sees(self, action: Action, team: str) -> bool:
        return self.decide(action, team).visible

    def teams_allowed(self, action: Action) -> list[str] | None:
        """The teams in which the caller may do ``action``: None for every team (an
        administrator); Forbidden, naming the role needed, where there is none."""
        if self.admin:
            return None
        allowed = sorted(team for team in self.teams if self.decide(action, team).allowed)
        if not allowed:
            needed = RULES[action].team
            if needed is None:
                raise Forbidden(self.refusal(action, None, None, Decision(True, False)))
            mine = ", ".join(f"{role.value} of {team}" for team, role in sorted(self.teams.items()))
            raise Forbidden(
                f"{action.value} needs the role {needed.value} in a team (yours: {mine or 'none'})"
            )
        return allowed

    @property
    def only_team(self) -> str | None:
        """The caller's team where it has exactly one (where a new object goes by default);
        None for an administrator or a user of several teams or none."""
        if self.admin or len(self.teams) != 1:
            return None
        (team,) = self.teams
        return team

    def teams_seen(self) -> list[str] | None:
        """The teams whose objects the caller sees; None for all (an administrator)."""
        return None if self.admin else sorted(self.teams)

    def refusal(
        self, action: Action, team: str | None, owner: str | None, decision: Decision
    ) -> str:
        """``stopping jobs of other users in team 'vision' needs the role team-admin
        (yours: member)``."""
        whose = " of other users" if owner is not None and owner != self.user else ""
        if decision.needed is None:
            return f"{action.value}{whose} needs an administrator (you are {self.user!r})"
        mine = self.teams.get(team) if team is not None else None
        return (
            f"{action.value}{whose} in team {team!r} needs the role {decision.needed.value} "
            f"(yours: {mine.value if mine else 'none'})"
        )


EMBEDDED = Caller("", admin=True)
"""The single user of an embedded ``trainfleet run`` (or a command on the server's own
data directory): no server, nothing to check."""
