"""Jobs given as Apache Submarine-style flags, turned into the same JobSpec.

>>> job = from_submarine_args(SubmarineArgs(
...     name="mnist", num_workers=2, worker_resources="memory=8G,vcores=2,gpu=1",
...     worker_launch_cmd="python train.py", num_ps=1, ps_launch_cmd="trainfleet tf-server"))
>>> job.spec.roles["worker"].replicas, job.spec.roles["worker"].resources.cpu
(2, 2000)

A bare memory number is MiB, as in YARN (``memory=4096`` is 4Gi).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from trainfleet.spec.errors import (
    Path,
    Problem,
    SourceMap,
    SpecError,
    spec_error_from_validation,
)
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.limits import JobLimits, check_limits
from trainfleet.spec.loading import LoadedJob
from trainfleet.spec.models import JobSpec, Resources

_RESOURCE_NAMES = {
    "memory": "memory",
    "memory-mb": "memory",
    "vcores": "cpu",
    "cpu": "cpu",
    "gpu": "gpu",
    "yarn.io/gpu": "gpu",
}


@dataclass(frozen=True)
class SubmarineArgs:
    """The raw values of the Submarine flags (None or empty: not given)."""

    name: str | None = None
    framework: str | None = None
    num_workers: int | None = None
    worker_resources: str | None = None
    worker_launch_cmd: str | None = None
    worker_docker_image: str | None = None
    num_ps: int | None = None
    ps_resources: str | None = None
    ps_launch_cmd: str | None = None
    ps_docker_image: str | None = None
    docker_image: str | None = None
    env: tuple[str, ...] = ()
    input_path: str | None = None
    checkpoint_path: str | None = None
    tensorboard: bool | None = None
    quicklink: tuple[str, ...] = ()


@dataclass(frozen=True)
class _RoleFlags:
    role: str
    count: str
    resources: str
    launch_cmd: str
    image: str


_ROLES = (
    _RoleFlags(
        "worker", "num_workers", "worker_resources", "worker_launch_cmd", "worker_docker_image"
    ),
    _RoleFlags("ps", "num_ps", "ps_resources", "ps_launch_cmd", "ps_docker_image"),
)


def _flag(attribute: str) -> str:
    return f"--{attribute}"


def from_submarine_args(args: SubmarineArgs) -> LoadedJob:
    """The job the flags describe; raises SpecError naming the flag that is wrong."""
    problems: list[Problem] = []
    warnings: list[str] = []
    origin: dict[Path, Path] = {(): ()}
    for field in ("name", "framework", "env", "input_path", "checkpoint_path"):
        origin[(field,)] = (_flag(field),)
    origin[("roles",)] = (_flag("num_workers"),)
    job: dict[str, Any] = {
        "framework": (args.framework or Framework.TENSORFLOW).lower(),
        "roles": {},
        "env": _env(args.env, problems),
    }
    if args.name is None:
        problems.append(Problem(None, None, "--name", "is required"))
    else:
        job["name"] = args.name
    for key in ("input_path", "checkpoint_path"):
        if getattr(args, key) is not None:
            job[key] = getattr(args, key)
    if args.tensorboard:
        job["tensorboard"] = {}
        origin[("tensorboard",)] = (_flag("tensorboard"),)
    if args.quicklink:
        job["quicklinks"] = _quicklinks(args.quicklink, problems)
        origin[("quicklinks",)] = (_flag("quicklink"),)
    for flags in _ROLES:
        role = _role(args, flags, problems, warnings, origin)
        if role is not None:
            job["roles"][flags.role] = role
    if "worker" not in job["roles"] and not problems:
        message = "nothing to run: give --num_workers N and --worker_launch_cmd"
        if job["roles"]:
            message += " (parameter servers alone never finish)"
        problems.append(Problem(None, None, "--num_workers", message))
    if problems:
        raise SpecError(problems)
    try:
        spec = JobSpec.model_validate(job)
    except ValidationError as error:
        raise spec_error_from_validation(error, job, SourceMap(), origin=origin) from None
    check_limits(spec, JobLimits(), origin=origin)
    return LoadedJob(spec, warnings, "submarine")


def _role(
    args: SubmarineArgs,
    flags: _RoleFlags,
    problems: list[Problem],
    warnings: list[str],
    origin: dict[Path, Path],
) -> dict[str, Any] | None:
    """The role one group of flags describes, or None when it has no replicas."""
    count: int | None = getattr(args, flags.count)
    command: str | None = getattr(args, flags.launch_cmd)
    if count is None:
        count = 1 if command else 0
    if count < 0:
        problems.append(Problem(None, None, _flag(flags.count), f"must be at least 0, got {count}"))
        return None
    if count == 0:
        if command:
            warnings.append(f"{_flag(flags.launch_cmd)} is ignored: {_flag(flags.count)} is 0")
        return None
    if not command:
        message = f"is required when {_flag(flags.count)} is {count}"
        if flags.role == "ps":
            message += " (for a plain TensorFlow parameter server: 'trainfleet tf-server')"
        problems.append(Problem(None, None, _flag(flags.launch_cmd), message))
        return None
    target: Path = ("roles", flags.role)
    role: dict[str, Any] = {"replicas": count, "command": command}
    origin[target] = origin[(*target, "replicas")] = (_flag(flags.count),)
    origin[(*target, "command")] = (_flag(flags.launch_cmd),)
    text: str | None = getattr(args, flags.resources)
    if text is not None:
        origin[(*target, "resources")] = (_flag(flags.resources),)
        try:
            role["resources"] = parse_resource_list(text, field=_flag(flags.resources))
        except SpecError as error:
            problems.extend(error.problems)
    image_flag = flags.image if getattr(args, flags.image) else "docker_image"
    image: str | None = getattr(args, image_flag)
    if image:
        role["image"] = image
        origin[(*target, "image")] = (_flag(image_flag),)
    return role


def _quicklinks(pairs: tuple[str, ...], problems: list[Problem]) -> dict[str, str]:
    """``NAME=http://ROLE-INDEX:PORT`` each (the link's own checks come with the job's)."""
    links: dict[str, str] = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not name.strip():
            expected = "expected NAME=http://ROLE-INDEX:PORT"
            problems.append(Problem(None, None, "--quicklink", f"{expected}, got {pair!r}"))
        elif name.strip() in links:
            problems.append(Problem(None, None, "--quicklink", f"{name.strip()!r} given twice"))
        else:
            links[name.strip()] = url.strip()
    return links


def _env(pairs: tuple[str, ...], problems: list[Problem]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            problems.append(Problem(None, None, "--env", f"expected NAME=VALUE, got {pair!r}"))
        else:
            env[key.strip()] = value
    return env


def parse_resource_list(text: str, *, field: str = "resources") -> Resources:
    """Resources from a YARN-style list such as ``memory=8G,vcores=2,gpu=1``.

    Names: ``memory`` (bare numbers are MiB), ``memory-mb``, ``vcores`` (or ``cpu``) and
    ``gpu`` (or ``yarn.io/gpu``). Raises SpecError for ``field``, naming the bad part.

    >>> parse_resource_list("memory=4096,vcores=2").memory == 4096 * 2**20
    True
    """
    values: dict[str, Any] = {}
    problems: list[Problem] = []

    def bad(part: str, message: str) -> None:
        problems.append(Problem(None, None, field, f"{part!r}: {message}"))

    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, sep, value = (item.strip() for item in part.partition("="))
        target = _RESOURCE_NAMES.get(name.lower())
        if not sep or not name or not value:
            bad(part, "expected name=value, e.g. memory=8G")
        elif target is None:
            bad(part, f"unknown resource {name!r}: use memory, vcores or gpu")
        elif target in values:
            bad(part, f"{target} is given twice")
        else:
            if target == "memory" and value.isdigit():
                value += "Mi"
            try:
                Resources.model_validate({target: value})
            except ValidationError as error:
                reason = spec_error_from_validation(error, {target: value}, SourceMap())
                bad(part, "; ".join(problem.message for problem in reason.problems))
            values[target] = value
    if not values and not problems:
        problems.append(
            Problem(None, None, field, "no resources given: e.g. memory=8G,vcores=2,gpu=1")
        )
    if problems:
        raise SpecError(problems)
    return Resources.model_validate(values)
