"""What one environment is made of, and the digest that names it in the cache.

Two jobs that ask for the same Python, the same requirements (in any order) and a
requirements file with the same content, on the same platform, share one environment:
unless it builds something of a team's own (a direct reference such as ``pkg @
file:///...`` or a URL, a path, an option such as ``--find-links``), which only that
team's jobs share (its digest holds the team).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from trainfleet.datadir.files import read_inside
from trainfleet.domain.errors import BadInput
from trainfleet.spec.environments import PythonEnvironment

MAX_REQUIREMENTS = 1 << 20
"""Bytes of a requirements file read, at most."""


class MissingRequirementsFile(BadInput):
    """``environment.requirements`` names no readable file in the job's directory."""


@dataclass(frozen=True)
class Recipe:
    """An environment to build: its Python, its requirements and the file's text."""

    python: str
    pip: tuple[str, ...]
    requirements: str
    """The requirements file's content ("" when none)."""
    team: str = ""
    """The team whose own environment this is ("": any team's, see ``shared``)."""

    @classmethod
    def of(cls, environment: PythonEnvironment, workdir: Path, team: str = "") -> Recipe:
        """The recipe of a job's ``environment`` for ``team``; its requirements file is read
        now, from inside ``workdir`` (no link followed)."""
        text = ""
        if environment.requirements is not None:
            try:
                text = read_inside(workdir, environment.requirements, MAX_REQUIREMENTS).decode()
            except (OSError, ValueError) as error:
                why = error.strerror if isinstance(error, OSError) else str(error)
                raise MissingRequirementsFile(
                    f"environment.requirements: cannot read {environment.requirements!r} "
                    f"in the job's directory: {why}"
                ) from None
        python = environment.python or ".".join(map(str, sys.version_info[:2]))
        pip = tuple(sorted(set(environment.pip)))
        shared = all(map(_from_an_index, pip)) and all(map(_from_an_index, _lines(text)))
        return cls(python, pip, text, "" if shared else team)

    @property
    def shared(self) -> bool:
        """Built from an index's packages alone: every team's jobs may use it."""
        return not self.team

    @property
    def digest(self) -> str:
        """The name of its folder in the cache (sha256 of what it is made of, shortened)."""
        made_of = {
            "python": self.python,
            "pip": self.pip,
            "requirements": self.requirements,
            "platform": [sys.platform, platform.machine()],
            **({"team": self.team} if self.team else {}),
        }
        return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()[:32]

    def describe(self) -> str:
        """``python 3.11 with six, numpy>=2`` for events and logs."""
        wanted = [*self.pip, *(["-r requirements"] if self.requirements else [])]
        return f"python {self.python}" + (f" with {', '.join(wanted)}" if wanted else "")


def _lines(text: str) -> list[str]:
    """The requirement lines of a requirements file (comments and blank lines left out)."""
    lines = (line.split(" #", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _from_an_index(line: str) -> bool:
    """Whether ``line`` names a package of an index by name and version only (no URL, no
    path, no option, no line continuation)."""
    from packaging.requirements import InvalidRequirement, Requirement

    if line.startswith("-") or line.endswith("\\"):
        return False
    try:
        return Requirement(line).url is None
    except InvalidRequirement:
        return False
