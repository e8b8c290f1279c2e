"""``environment:`` of a job or a role: the Python its tasks run under, built by trainfleet.

>>> PythonEnvironment.model_validate({"pip": ["numpy>=2", "six"]}).pip
['numpy>=2', 'six']
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainfleet.spec.names import relative_inside

PYTHON_VERSION = re.compile(r"^3\.\d{1,2}(\.\d{1,3})?$")


class PythonEnvironment(BaseModel):
    """A virtual environment built with uv, cached by its content, shared by every job that
    asks for the same one. In its tasks, ``python`` and ``pip`` are its own."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # as JobSpec's

    python: str | None = Field(
        default=None,
        description="Python version, e.g. '3.12' (an interpreter already on the machine); "
        "default: the one trainfleet runs under.",
    )
    pip: list[str] = Field(
        default_factory=list, description="Requirements, as pip takes them: 'torch==2.13.0'."
    )
    requirements: str | None = Field(
        default=None, description="A requirements file, relative to the job's directory."
    )

    @field_validator("python")
    @classmethod
    def _python(cls, value: str | None) -> str | None:
        if value is not None and not PYTHON_VERSION.match(value):
            raise ValueError(f"python {value!r} is not a version such as '3.12' or '3.12.1'")
        return value

    @field_validator("pip")
    @classmethod
    def _requirements(cls, value: list[str]) -> list[str]:
        # Imported here: it costs 40 ms, which every command would pay, not just jobs with pip.
        from packaging.requirements import InvalidRequirement, Requirement

        for number, line in enumerate(value):
            try:
                Requirement(line)
            except InvalidRequirement as error:
                problem = str(error).splitlines()[0]
                message = f"pip[{number}]: {line!r} is not a requirement: {problem}"
                raise ValueError(message) from None
        return value

    @field_validator("requirements")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not relative_inside(value):
            raise ValueError(
                f"requirements {value!r} must be a file inside the job's directory "
                "(a relative path)"
            )
        return value
