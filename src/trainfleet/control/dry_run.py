"""What ``run --dry-run`` shows: each task as it would start, and what a cluster engine would
be given, with nothing stored or started.

The faces show this view, never the backend's launches (which also hold the attempt's
records, its account and the secret values its log masks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine
    from trainfleet.spec.models import JobSpec


@dataclass(frozen=True)
class PlannedTask:
    """One task as it would start: its command, directory, image and environment."""

    role: str
    index: int
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    image: str | None = None
    entrypoint: bool = False
    """True: ``argv`` are arguments to the image's own ENTRYPOINT."""


@dataclass(frozen=True)
class DryRun:
    """Every task of a job as it would start, and the submission a cluster engine would be
    given (None where tasks start directly)."""

    tasks: list[PlannedTask]
    submission: str | None = None


def dry_run(engine: Engine, spec: JobSpec, workdir: Path) -> DryRun:
    """What ``engine`` would start for ``spec`` in ``workdir``; raises Unschedulable for a job
    its backend can never run."""
    preview = engine.dry_run(spec, workdir)
    tasks = []
    for launch in preview.tasks:
        role, index = launch.key
        tasks.append(
            PlannedTask(
                role, index, launch.argv, launch.env, launch.cwd, launch.image, launch.entrypoint
            )
        )
    return DryRun(tasks, preview.submission)
