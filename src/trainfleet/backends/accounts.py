"""Each team's tasks as that team's own Unix account (``trainfleet server --isolate-teams``).

A server that runs as root starts every task of team ``vision`` as the account the
configuration maps it to, else ``tf-vision``, made on demand (a system account with a
group of its own, no home, no login shell). The task's supervisor stays root and keeps
the task's log and records where only root reads them; the task itself runs under
``setpriv`` (util-linux) with the account's uid and gid, no supplementary groups and no
way to gain privileges, or in its container with ``--user``. So a task cannot read the
server's database, tokens, secret key, logs, the environment of its processes
(``/proc/PID/environ`` is readable by the same uid only), nor another team's working
directories: each job's own folder is handed to its team's account, and the folders above
it let others pass (0711) without listing them.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainfleet.datadir.files import own_tree
from trainfleet.datadir.layout import PASSABLE_DIR
from trainfleet.domain.errors import Misconfigured

PREFIX = "tf-"
BUILDER = "trainfleet-build"
"""The account that builds the Python environments teams share: it runs no task, so no
task can change an environment while it is built (a team's own ones are built by its
account; see ``environments.cache``). No team's account is named so (``tf-`` first)."""
MAX_NAME = 32
"""Longest account name ``useradd`` takes."""


@dataclass(frozen=True)
class Account:
    """A Unix account tasks run as."""

    name: str
    uid: int
    gid: int

    def may_write(self, folder: Path) -> bool:
        """Whether this account may make files in ``folder`` by its mode bits (its uid,
        its one group, or anyone: it runs with no other group)."""
        found = os.stat(folder)
        if found.st_uid == self.uid:
            wanted = stat.S_IWUSR | stat.S_IXUSR
        elif found.st_gid == self.gid:
            wanted = stat.S_IWGRP | stat.S_IXGRP
        else:
            wanted = stat.S_IWOTH | stat.S_IXOTH
        return found.st_mode & wanted == wanted

    def command(self, argv: Iterable[str]) -> list[str]:
        """``argv`` run as this account: its uid and gid, no other group, no new privileges."""
        setpriv = shutil.which("setpriv") or "setpriv"
        ids = [f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        return [setpriv, *ids, "--no-new-privs", "--", *argv]

    def hand_over(self, folder: Path) -> None:
        """Make ``folder`` and all it holds this account's (its own only: 0700), following
        no link (see ``datadir.files``)."""
        own_tree(folder, self.uid, self.gid, mode=0o700)


class TeamAccounts:
    """The account of each team: configured ones, else ``tf-<team>`` made on demand."""

    def __init__(self, configured: Mapping[str, str] | None = None) -> None:
        self.configured = dict(configured or {})
        self._known: dict[str, Account] = {}
        self._lock = threading.Lock()

    @staticmethod
    def check() -> None:
        """Misconfigured unless this process can start tasks as other accounts."""
        if os.geteuid() != 0:
            raise Misconfigured(
                "--isolate-teams: tasks run as their team's account only under a server "
                "running as root"
            )
        for tool in ("setpriv", "useradd"):
            if shutil.which(tool) is None:
                raise Misconfigured(f"--isolate-teams: {tool} is missing (util-linux, passwd)")

    def of(self, team: str) -> Account:
        """The team's account, made now if it does not exist."""
        return self._account(team, self.configured.get(team) or account_name(team))

    def builder(self) -> Account:
        """The account of shared environments' builds, made now if it does not exist."""
        return self._account("", BUILDER)

    def _account(self, key: str, name: str) -> Account:
        with self._lock:
            if key not in self._known:
                self._known[key] = _existing(name) or _made(name)
            return self._known[key]


def account_name(team: str) -> str:
    """``tf-<team>``, shortened with a digest of the name where it would be too long."""
    name = f"{PREFIX}{team}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(team.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}-{digest}"


def open_to_tasks(folders: Iterable[Path]) -> None:
    """Let accounts pass through ``folders`` (0711) to the job folders handed to them."""
    for folder in folders:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, PASSABLE_DIR)


def _existing(name: str) -> Account | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(name, entry.pw_uid, entry.pw_gid)


def _made(name: str) -> Account:
    argv = ["useradd", "--system", "--user-group", "--no-create-home"]
    argv += ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    made = _existing(name)  # another server may have made it at the same time
    if made is None:
        raise Misconfigured(f"cannot make the account {name!r}: {done.stderr.strip()}")
    return made
