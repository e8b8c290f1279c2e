"""One call of a function as a job, against any host that stores and runs jobs."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import IO, Any, Protocol

from trainfleet.datadir.follow import LogFollower, LogSource
from trainfleet.domain.records import JobRecord, TaskRecord
from trainfleet.functions.job import RunOptions, function_spec
from trainfleet.functions.outcome import outcome
from trainfleet.functions.payload import dumps_call
from trainfleet.spec.models import JobSpec

POLL = 0.25
"""Seconds between two reads of the tasks' logs while the job runs (its end is waited for
in between, and acted on at once)."""
STOP_WAIT = 60.0
"""Seconds a call interrupted (Ctrl-C) waits for its job to stop before it gives up."""


class FunctionHost(LogSource, Protocol):
    """Where the function's job runs: this machine's engine, or a server."""

    def submit_call(self, spec: JobSpec, folder: Path, payload: bytes) -> str:
        """Store and start the job, with ``folder``'s kept files and the payload; its id."""
        ...

    def tasks(self, job_id: str) -> list[TaskRecord]: ...

    def wait(self, job_id: str, timeout: float) -> bool: ...

    def get(self, job_id: str) -> JobRecord: ...

    def interrupt(self, job_id: str) -> None: ...

    def output_names(self, job_id: str) -> list[str]: ...

    def output(self, job_id: str, name: str) -> bytes: ...


def call(
    host: FunctionHost,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: RunOptions,
    workdir: str | os.PathLike[str] | None = None,
    out: IO[str] | None = None,
) -> Any:
    """Run ``fn(*args, **kwargs)`` in every task of a job on ``host``, the tasks' logs
    written to ``out`` (stdout) as they come; rank 0's result, or RemoteError. Ctrl-C
    stops the job (and waits for it to end) before it goes on."""
    folder = Path(workdir if workdir is not None else os.getcwd()).resolve()
    spec = function_spec(fn, options)
    job_id = host.submit_call(spec, folder, dumps_call(fn, args, kwargs, folder))
    shown = out or sys.stdout
    try:
        logs = LogFollower(host, job_id, [(task.role, task.index) for task in host.tasks(job_id)])
        while not host.wait(job_id, POLL):
            _show(logs, shown, final=False)
        _show(logs, shown, final=True)
    except KeyboardInterrupt:
        host.interrupt(job_id)
        with suppress(KeyboardInterrupt):
            host.wait(job_id, STOP_WAIT)
        raise
    job = host.get(job_id)
    names = host.output_names(job_id)
    return outcome(job_id, job.state, job.reason, lambda name: host.output(job_id, name), names)


def _show(logs: LogFollower, out: IO[str], *, final: bool) -> None:
    text = b"".join(logs.read(final=final)).decode(errors="replace")
    if text:
        out.write(text)
        out.flush()
