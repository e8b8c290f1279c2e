"""``JobService`` on the engine embedded in this process (no server).

A job submitted with ``detach`` runs in a background ``trainfleet _runner JOB_ID``
process (its own session, output in the job's folder: ``runner.log``); every process
that runs a job leaves its pid in ``runner.pid``, so ``trainfleet stop`` from another
terminal can ask it to stop the job, and a job whose process is gone is found lost
(``control.local_admission``). Jobs are admitted against every local process's jobs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Self

import click

from trainfleet.cli.errors import UserError
from trainfleet.cli.reading import StoreReader
from trainfleet.cli.service import JobInput
from trainfleet.control import local_admission, local_stop
from trainfleet.control.access import EMBEDDED
from trainfleet.control.engine import Engine
from trainfleet.control.services.reads import JobReads
from trainfleet.datadir import runners
from trainfleet.datadir.layout import create_private
from trainfleet.domain.records import JobRecord, State
from trainfleet.spec.loading import LoadedJob, load_job_file

if TYPE_CHECKING:
    from trainfleet.control.services.gpus import Gpus
    from trainfleet.control.services.queues import Queues
    from trainfleet.control.settings import Settings
    from trainfleet.wire import GpuState, QueueBody, QueueState


def load(job: JobInput) -> tuple[LoadedJob, Path]:
    """The validated job and its default directory; its warnings are printed."""
    if job.file and job.submarine:
        raise UserError("give a job file or Submarine-style flags, not both")
    if job.spec is not None:
        loaded, folder = LoadedJob(job.spec, [], "trainfleet"), Path.cwd()
    elif job.submarine:
        from trainfleet.spec.submarine import from_submarine_args

        loaded, folder = from_submarine_args(job.submarine), Path.cwd()
    elif job.file:
        loaded = load_job_file(job.file, job.runtimes)
        folder = Path(job.file).resolve().parent
    else:
        raise UserError("missing JOB_FILE (or Submarine-style flags such as --num_workers)")
    for warning in loaded.warnings:
        click.echo(f"warning: {warning}", err=True)
    return loaded, folder


class EngineService(StoreReader):
    """Jobs in a data directory on this machine, run by this or another local process.

    Reads as ``StoreReader`` does, through the engine's store."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine.data_dir, JobReads.of(engine))
        self.engine = engine

    @classmethod
    def of(cls, settings: Settings) -> Self:
        """The engine the settings describe, on the backend the config file names (this
        machine by default)."""
        from trainfleet.control.assembly import embedded_engine

        return cls(embedded_engine(settings))

    def submit(self, job: JobInput, *, detach: bool) -> JobRecord:
        if job.server_workdir is not None:
            raise UserError("--server-workdir needs a server (--server); here use --workdir")
        loaded, folder = load(job)
        workdir = Path(job.workdir).resolve() if job.workdir else folder
        if not workdir.is_dir():
            raise UserError(f"workdir {str(workdir)!r} is not a directory")
        record = self.engine.submit(loaded.spec, workdir, loaded.source)
        if detach:
            self._spawn_runner(record.id)
        return record

    def _spawn_runner(self, job_id: str) -> None:
        folder = self.engine.data_dir.job_dir(job_id)
        folder.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "trainfleet", "--data-dir", str(self.engine.data_dir.root)]
        with open(create_private(folder / "runner.log"), "ab") as log:
            process = subprocess.Popen(
                [*argv, "_runner", job_id],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C in this terminal must not reach it
            )
        runners.record_runner(self.engine.data_dir, job_id, process.pid)

    def attach(self, job_id: str) -> str:
        runners.record_runner(self.engine.data_dir, job_id)
        local_admission.SharedAdmission(self.engine, job_id).start()
        return f"logs in {self.engine.data_dir.job_dir(job_id)}"

    def wait(self, job_id: str, timeout: float) -> bool:
        return self.engine.wait_ended(job_id, timeout)

    def queues(self) -> list[QueueState]:
        return self._queues().visible(EMBEDDED)

    def put_queue(self, name: str, body: QueueBody) -> QueueState:
        return self._queues().put(EMBEDDED, name, body)

    def _queues(self) -> Queues:
        """The queues service: it decides each queue's team, as for a server."""
        from trainfleet.control.services.queues import Queues

        return Queues.of(self.engine)

    def gpus(self) -> list[GpuState]:
        return self._gpus().visible(EMBEDDED)

    def clear_gpu(self, index: int) -> GpuState:
        return self._gpus().clear(EMBEDDED, index)

    def _gpus(self) -> Gpus:
        """The GPUs service over this engine (this machine's GPUs)."""
        from trainfleet.control.services.gpus import Gpus

        return Gpus(self.engine, JobReads.of(self.engine))

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord:
        """Stop the job here, or ask the local process that runs it to stop it (SIGTERM)."""
        try:
            return local_stop.stop(self.engine, job_id, reason)
        except local_stop.NotStopped as error:
            raise UserError(str(error), exit_code=1) from None

    def interrupt(self, job_id: str) -> None:
        if not self.engine.runner.cancel(job_id, "interrupted"):
            self.engine.cancel(job_id, "interrupted")  # still waiting: it never starts

    def delete(self, job_id: str, force: bool) -> None:
        job = self.get(job_id)  # a lost job is recorded as failed here
        if force and not State(job.state).is_final:
            self.cancel(job_id, "deleted")
        self.engine.delete(job_id, force=force)

    def _checked(self, job: JobRecord) -> JobRecord:
        """The job, recorded as failed first if the process that ran it is gone."""
        return local_admission.fail_if_lost(self.engine, job)
