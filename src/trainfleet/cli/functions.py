"""``trainfleet.run``: a function as a job on this machine's engine (no server)."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from trainfleet.cli.embedded import EngineService
from trainfleet.functions.call import call
from trainfleet.functions.job import SOURCE, RunOptions
from trainfleet.spec.functions import PAYLOAD
from trainfleet.spec.models import JobSpec
from trainfleet.workdirs.pack import CAP_VARIABLE, client_cap, copy_kept


class EngineHost(EngineService):
    """The engine in this process, on the data directory the settings name."""

    def submit_call(self, spec: JobSpec, folder: Path, payload: bytes) -> str:
        """The job runs in its own copy of ``folder``'s kept files (as a server's would),
        with the payload, and is started here at once."""
        cap = client_cap(os.environ.get(CAP_VARIABLE))
        fill = partial(copy_kept, folder, cap=cap, extra={PAYLOAD: payload})
        record = self.engine.submit(spec, None, SOURCE, fill_workdir=fill)
        self.attach(record.id)
        return record.id

    def output_names(self, job_id: str) -> list[str]:
        return [found.name for found in self.outputs(job_id)]


def run(
    fn: Callable[..., Any],
    /,
    *args: Any,
    workers: int = 1,
    framework: str = "pytorch",
    workdir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    **options: Any,
) -> Any:
    """Call ``fn(*args)`` in ``workers`` tasks of a job run by this machine's engine (no
    server), with ``framework``'s variables set in each (``pytorch``: ``init_process_group``
    works as it is), and return rank 0's result; the tasks' logs are printed as they come,
    each line prefixed ``worker/N``. The caller's folder (``workdir``, default the current
    one) goes with it as a job's directory is sent to a server.

    ``options``: ``resources``, ``environment``, ``queue``, ``name``, ``env``, ``image``,
    ``restart``, ``labels`` (see ``RunOptions``), and ``kwargs`` for ``fn``. Raises
    RemoteError with the remote type, message and traceback where the function raised.
    """
    from trainfleet.control.settings import Settings

    chosen, kwargs = RunOptions.split(workers=workers, framework=framework, **options)
    settings = Settings.resolve(data_dir=str(data_dir) if data_dir is not None else None)
    host = EngineHost.of(settings)
    try:
        return call(host, fn, args, kwargs, chosen, workdir)
    finally:
        host.engine.shutdown()  # its job has ended, unless this call failed: then stop it
        host.close()
