"""A team server as the README sets it up (root, ``--isolate-teams``) and members who try
to get around it: ana (team vision) and bo (team audio), each a plain member.

Needs root and setpriv (the server switches tasks to the teams' accounts): skipped
elsewhere, failed under CI.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from server.harness import ServerProcess

from trainfleet.client import Client
from trainfleet.wire import UserBody


@dataclass
class TeamServer:
    """A root server isolating teams, with a member token of each of two teams."""

    server: ServerProcess
    data: Path
    """Its data directory."""
    folder: Path
    """A folder every account may pass through, for the members' job folders."""
    admin: str
    ana: str
    """A member of team vision."""
    bo: str
    """A member of team audio."""

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, token: str) -> Client:
        return Client(self.server.url, token, timeout=60)

    def project(self, name: str, files: dict[str, str]) -> Path:
        """A job folder of ``files`` (relative path: text), readable by every account."""
        root = self.folder / name
        for relative, text in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return root


def start_team_server(
    passable: Path, args: list[str] | None = None, env: dict[str, str] | None = None
) -> TeamServer:
    """A server on ``passable/data`` isolating teams vision and audio, with ana and bo."""
    data = passable / "data"
    server = ServerProcess(data, env=env, args=["--isolate-teams", *(args or [])])
    try:
        admin = server.admin_token
        assert admin
        with Client(server.url, admin) as client:
            client.create_team("vision")
            client.create_team("audio")
            ana = client.create_user(UserBody(name="ana", team="vision")).token
            bo = client.create_user(UserBody(name="bo", team="audio")).token
    except BaseException:
        server.stop()
        raise
    return TeamServer(server, data, passable, admin, ana, bo)


@pytest.fixture
def team_server(passable: Path) -> Iterator[TeamServer]:
    """A fresh team server (SQLite) of this test; stopped, with its jobs, at the end."""
    teams = start_team_server(passable)
    try:
        yield teams
    finally:
        with teams.client(teams.admin) as admin:
            for job in admin.list_jobs():
                if job.state not in ("succeeded", "failed", "cancelled"):
                    with contextlib.suppress(Exception):  # best effort: the server stops next
                        admin.cancel(job.id)
        teams.server.stop()
