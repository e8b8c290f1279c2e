"""Which folders of the server's machine a submitted job may use beyond its own.

A job uses folders of the machine in two ways: it runs in place in one (``--server-workdir``,
a shared file system) and its containers mount others (``mounts:``, Kubeflow ``hostPath``
volumes). An operator who lists folders (``trainfleet server --allow-path``) lets jobs use
those and nothing else: every path is resolved (links followed) before it is compared, so
``..`` and links lead nowhere new. A job's own folder (the copy of what it sent, or the
server's default folder) is always its to mount from. With no list, any folder may be used,
as on a machine of one team.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from trainfleet.spec.errors import Problem, SpecError
from trainfleet.spec.models import JobSpec


class HostPaths:
    """The folders jobs may use (``allowed``), or any folder when ``allowed`` is None."""

    def __init__(self, allowed: Iterable[Path] | None = None) -> None:
        self.allowed = None if allowed is None else tuple(_real(path) for path in allowed)

    def check(self, spec: JobSpec, directory: Path, in_place: bool) -> None:
        """SpecError naming each field that uses a folder this server does not allow.

        ``directory``: where the job runs; ``in_place``: the submission chose it (rather
        than sending a folder, or taking the server's default), so it must be allowed too.
        """
        if self.allowed is None:
            return
        problems = []
        base = _real(directory)
        if in_place and not self._allows(base):
            problems.append(Problem(None, None, "workdir", self._refusal(base)))
        for role, role_spec in spec.roles.items():
            for index, mount in enumerate(role_spec.mounts):
                source = _real(directory / mount.source)
                if not (source.is_relative_to(base) or self._allows(source)):
                    field = f"roles.{role}.mounts[{index}].source"
                    problems.append(Problem(None, None, field, self._refusal(source)))
        if problems:
            raise SpecError(problems)

    def _allows(self, path: Path) -> bool:
        return any(path.is_relative_to(folder) for folder in self.allowed or ())

    def _refusal(self, path: Path) -> str:
        listed = ", ".join(str(folder) for folder in self.allowed or ()) or "none"
        return (
            f"{path} is outside the folders this server lets jobs use (--allow-path: "
            f"{listed}); mount from the job's own folder, or ask an operator to allow it"
        )


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))
