"""The job a function runs as: one role, ``worker``, whose tasks each call it."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pydantic import ValidationError

from trainfleet.domain.errors import BadInput
from trainfleet.spec.errors import SourceMap, spec_error_from_validation
from trainfleet.spec.functions import PAYLOAD, FunctionCall, this_python
from trainfleet.spec.models import JobSpec

ROLE = "worker"
SOURCE = "function"
"""The job's source, as its record says (a job file says ``trainfleet``)."""

OPTIONS: dict[tuple[Hashable, ...], tuple[Hashable, ...]] = {
    ("roles", ROLE, "replicas"): ("workers",),
    ("roles", ROLE, "resources"): ("resources",),
    ("roles", ROLE): (),
}
"""The job's fields as the options of ``run`` that set them (the others are named alike)."""


@dataclass(frozen=True)
class RunOptions:
    """How ``Client.run`` and ``trainfleet.run`` run a function, as a job file would say it."""

    workers: int = 1
    framework: str = "pytorch"
    resources: Mapping[str, Any] | None = None
    environment: Mapping[str, Any] | None = None
    """A Python environment (``python``, ``pip``, ``requirements``): its ``python`` is the
    caller's unless given, and it gets the caller's cloudpickle unless it names one."""
    queue: str | None = None
    name: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None
    restart: Mapping[str, Any] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def split(cls, **given: Any) -> tuple[RunOptions, dict[str, Any]]:
        """The options given to ``run``, and its ``kwargs`` for the function; BadInput
        naming any option it does not know."""
        kwargs = dict(given.pop("kwargs", None) or {})
        known = {option.name for option in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise BadInput(
                f"run(): no option {', '.join(map(repr, unknown))} (options: "
                f"{', '.join(sorted(known))}, and kwargs for the function)"
            )
        return cls(**given), kwargs


def function_spec(fn: Callable[..., Any], options: RunOptions) -> JobSpec:
    """The job that calls ``fn`` in ``options.workers`` tasks; BadInput naming the option
    that the job cannot take, as a job file's field would be named."""
    role: dict[str, Any] = {
        "replicas": options.workers,
        "command": FunctionCall(this_python(), PAYLOAD).argv(),
    }
    if options.resources:
        role["resources"] = dict(options.resources)
    document: dict[str, Any] = {
        "name": options.name or job_name(fn),
        "framework": options.framework,
        "roles": {ROLE: role},
        "success": "all-workers",  # any task's error is the call's
        "env": dict(options.env),
        "labels": {"trainfleet/function": "true", **options.labels},
    }
    for key in ("queue", "image"):
        if getattr(options, key) is not None:
            document[key] = getattr(options, key)
    if options.restart is not None:
        document["restart"] = dict(options.restart)
    if options.environment is not None:
        document["environment"] = _environment(options.environment)
    try:
        return JobSpec.model_validate(document)
    except ValidationError as error:  # named as the caller's options
        source = SourceMap("run()")
        raise spec_error_from_validation(error, document, source, origin=OPTIONS) from None


def job_name(fn: Callable[..., Any]) -> str:
    """A job name from the function's: ``train_model`` gives ``train-model``."""
    name = re.sub(r"[^a-z0-9]+", "-", getattr(fn, "__name__", "function").lower()).strip("-")
    return (name if name[:1].isalpha() else f"fn-{name}").rstrip("-")[:40] or "function"


def _environment(given: Mapping[str, Any]) -> dict[str, Any]:
    environment = dict(given)
    python = str(environment.setdefault("python", this_python()))
    if ".".join(python.split(".")[:2]) != this_python():
        raise BadInput(
            f"environment.python: {python} differs from this Python, {this_python()}: a "
            "pickled function runs only under the minor version that pickled it"
        )
    pip = list(environment.get("pip") or [])
    if not any(re.match(r"cloudpickle\b", line.strip(), re.IGNORECASE) for line in pip):
        import cloudpickle

        pip.append(f"cloudpickle=={cloudpickle.__version__}")
    environment["pip"] = pip
    return environment
