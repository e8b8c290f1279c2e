"""What one environment is made of, and the digest that names it in the cache.

Two jobs that ask for the same Python, the same requirements (in any order) and a
requirements file with the same content, on the same platform, share one environment.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from trainfleet.domain.errors import BadInput
from trainfleet.spec.environments import PythonEnvironment


class MissingRequirementsFile(BadInput):
    """``environment.requirements`` names no readable file in the job's directory."""


@dataclass(frozen=True)
class Recipe:
    """An environment to build: its Python, its requirements and the file's text."""

    python: str
    pip: tuple[str, ...]
    requirements: str
    """The requirements file's content ("" when none)."""

    @classmethod
    def of(cls, environment: PythonEnvironment, workdir: Path) -> Recipe:
        """The recipe of a job's ``environment``; its requirements file is read now."""
        text = ""
        if environment.requirements is not None:
            path = workdir / environment.requirements
            try:
                text = path.read_text()
            except OSError as error:
                raise MissingRequirementsFile(
                    f"environment.requirements: cannot read {path}: {error.strerror}"
                ) from None
        python = environment.python or ".".join(map(str, sys.version_info[:2]))
        return cls(python, tuple(sorted(set(environment.pip))), text)

    @property
    def digest(self) -> str:
        """The name of its folder in the cache (sha256 of what it is made of, shortened)."""
        made_of = {
            "python": self.python,
            "pip": self.pip,
            "requirements": self.requirements,
            "platform": [sys.platform, platform.machine()],
        }
        return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()[:32]

    def describe(self) -> str:
        """``python 3.11 with six, numpy>=2`` for events and logs."""
        wanted = [*self.pip, *(["-r requirements"] if self.requirements else [])]
        return f"python {self.python}" + (f" with {', '.join(wanted)}" if wanted else "")
