"""What a function's job answers: rank 0's result, or the error a task raised."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from typing import Any

from trainfleet.domain.errors import NotFound, RemoteError
from trainfleet.programs.run_function import RESULT


def outcome(
    job_id: str, state: str, reason: str, read: Callable[[str], bytes], names: list[str]
) -> Any:
    """The result of the job ``job_id``, ended in ``state`` for ``reason``, whose output
    files are ``names``, each read by ``read``; RemoteError where it has none."""
    if state == "succeeded" and RESULT in names:
        return pickle.loads(read(RESULT))
    errors = sorted((name for name in names if name.startswith("error-")), key=_by_rank)
    for name in errors:  # the first task's, by role and index
        try:
            report = json.loads(read(name))
        except (NotFound, ValueError):
            continue
        raise RemoteError(
            report.get("message", ""),
            task=report.get("task", ""),
            remote_type=report.get("type", ""),
            traceback=report.get("traceback", ""),
        )
    if state == "succeeded":
        raise RemoteError(f"job {job_id} succeeded, but rank 0 left no result")
    raise RemoteError(f"job {job_id} {state}: {reason}")


def _by_rank(name: str) -> tuple[int, str]:
    """``error-worker-2.json`` before ``error-worker-10.json``."""
    return len(name), name
