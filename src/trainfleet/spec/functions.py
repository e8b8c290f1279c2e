"""A function sent as a job (``Client.run``, ``trainfleet.run``): its role's command.

The role runs ``trainfleet run-function --python X.Y PAYLOAD``: the program
``programs/run_function.py`` under the task's Python, which must be the sender's X.Y (a
pickled function runs under the minor version that pickled it). The engine checks that
before it stores the job (``python_problem``), where it knows which Python that is.

>>> FunctionCall.of(["trainfleet", "run-function", "--python", "3.12", ".trainfleet/call.pkl"])
FunctionCall(python='3.12', payload='.trainfleet/call.pkl')
>>> FunctionCall.of(["python", "train.py"]) is None
True
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainfleet.spec.models import JobSpec

PROGRAM_WORDS = ("trainfleet", "run-function")
"""The command, made standalone at launch (``frameworks.argv``)."""

PAYLOAD = ".trainfleet/call.pkl"
"""Where the pickled call is in the job's folder (sent with it)."""


@dataclass(frozen=True)
class FunctionCall:
    """What a role's ``run-function`` command names: the sender's Python and the payload."""

    python: str
    payload: str

    @classmethod
    def of(cls, argv: list[str]) -> FunctionCall | None:
        """The call ``argv`` makes, or None for any other command."""
        if tuple(argv[:2]) != PROGRAM_WORDS or len(argv) not in (3, 5):
            return None
        if len(argv) == 3:
            return cls("", argv[2])
        if argv[2] != "--python":
            return None
        return cls(argv[3], argv[4])

    def argv(self) -> list[str]:
        return [*PROGRAM_WORDS, "--python", self.python, self.payload]


def this_python() -> str:
    """This interpreter's ``X.Y``."""
    return "{}.{}".format(*sys.version_info[:2])


def python_problem(spec: JobSpec) -> str | None:
    """Why a role of ``spec`` that runs a function would run it under another Python than
    the one that pickled it, or None. A role with an image runs the image's Python, known
    only in the task: the program itself says so there."""
    for name, role in spec.roles.items():
        call = FunctionCall.of(role.argv()) if role.command is not None else None
        if call is None or not call.python or spec.image_of(name):
            continue
        environment = spec.environment_of(name)
        if environment is not None:
            runs = ".".join((environment.python or this_python()).split(".")[:2])
            where = "its environment's"
        else:
            runs, where = this_python(), f"trainfleet's own ({sys.executable})"
        if runs != call.python:
            return (
                f"roles.{name}: the function was sent from Python {call.python}, but its "
                f"tasks would run Python {runs}, {where}: give an environment with python "
                f"{call.python!r} (environment={{'python': {call.python!r}, 'pip': [...]}})"
            )
    return None
