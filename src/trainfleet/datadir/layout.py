"""Where trainfleet keeps its state on disk: the database and every task's log."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from trainfleet.domain.errors import Misconfigured

JOB_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
PRIVATE_DIR = 0o700
PASSABLE_DIR = 0o711
"""Others may pass through, not list (see ``backends.accounts``)."""
PRIVATE_FILE = 0o600
OUTPUT_VARIABLE = "TRAINFLEET_OUTPUT_DIR"
"""Where a task writes the files its job returns (``DataDir.output_dir``)."""
OUTPUT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""The name of an output: a plain file name (no folder in it, no leading dot)."""
MAX_OUTPUT = 256 << 20
"""The most bytes of one output that are read; a larger one is refused, with its size."""


def create_private(path: Path) -> int:
    """Open ``path`` for appending, created owner-only (0600) when it does not exist: logs
    and records may hold a job's secrets."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, PRIVATE_FILE)


@dataclass(frozen=True)
class DataDir:
    """The data directory: ``trainfleet.db`` and ``jobs/<id>/logs/<role>-<index>.log``."""

    root: Path
    """Where it is: ``--data-dir``, else as the environment says (see
    ``control.settings.Settings.data_dir``)."""

    def ensure(self) -> None:
        """Create the root owner-only (0700), and tighten an existing one to that, but
        for an isolating server's 0711 (its teams' accounts pass through to their jobs).
        Misconfigured where it cannot be made or used (a file, a folder not writable)."""
        try:
            self.root.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
            if stat.S_IMODE(self.root.stat().st_mode) not in (PRIVATE_DIR, PASSABLE_DIR):
                os.chmod(self.root, PRIVATE_DIR)
        except OSError as error:
            raise Misconfigured(
                f"cannot use the data directory {self.root}: {error.strerror or error}"
                " (--data-dir, or TRAINFLEET_DATA_DIR)"
            ) from None

    @property
    def database(self) -> Path:
        return self.root / "trainfleet.db"

    def job_dir(self, job_id: str) -> Path:
        if not JOB_ID.match(job_id):
            raise ValueError(f"invalid job id {job_id!r}")
        return self.root / "jobs" / job_id

    def log_path(self, job_id: str, role: str, index: int) -> Path:
        return self.job_dir(job_id) / "logs" / f"{role}-{index}.log"

    def setup_log(self, job_id: str) -> Path:
        """The output of the job's ``setup`` phase (its Python environments' builds)."""
        return self.job_dir(job_id) / "logs" / "setup.log"

    def task_share(self, job_id: str) -> Path:
        """What trainfleet shares with the job's tasks (one mount in a container): their
        checkpoints and heartbeats (theirs to write) and why each was stopped (ours)."""
        return self.job_dir(job_id) / "tasks"

    def checkpoint_dir(self, job_id: str) -> Path:
        """The job's checkpoints, where its file names no folder (written by its tasks)."""
        return self.task_share(job_id) / "checkpoints"

    def checkpoints_of(self, job_id: str, workdir: str | Path, named: str | None) -> str:
        """Where the job's checkpoints go: the folder its file ``named`` (relative: to its
        ``workdir``; a URL as written), else its own (``checkpoint_dir``)."""
        if named is None:
            return str(self.checkpoint_dir(job_id))
        return named if "://" in named else str(Path(workdir) / named)

    OUTPUT = "output"
    """Under ``task_share``: the job's output folder (``output_dir``)."""

    def output_dir(self, job_id: str) -> Path:
        """The files the job returns (``$TRAINFLEET_OUTPUT_DIR``): written by its tasks,
        read back by the user (``datadir.outputs``: plain files directly in it, no link)."""
        return self.task_share(job_id) / self.OUTPUT

    def heartbeat(self, job_id: str, role: str, index: int) -> Path:
        """The file a task touches to say it makes progress (``$TRAINFLEET_HEARTBEAT``)."""
        return self.task_share(job_id) / "heartbeats" / f"{role}-{index}"

    def task_python(self, job_id: str) -> Path:
        """A zip archive on the tasks' ``PYTHONPATH`` (last) holding ``trainfleet.checkpoint``,
        for a task whose python has no trainfleet of its own (an image, an environment):
        one file, where a package's folders and files would cost a job's start four."""
        return self.task_share(job_id) / "python.zip"

    ROUNDS = "rendezvous/rounds.jsonl"
    """Under ``task_share``: the rounds an elastic job's rendezvous store saw complete
    (written by that task)."""

    def rounds(self, job_id: str) -> Path:
        """The file of an elastic job's rendezvous rounds (``$TRAINFLEET_RENDEZVOUS_LOG``)."""
        return self.task_share(job_id) / self.ROUNDS

    def stop_file(self, job_id: str, role: str, index: int, attempt: int) -> Path:
        """Why trainfleet stops an attempt of a task, written before its SIGTERM
        (``$TRAINFLEET_STOP_FILE``): ``preempted``, ``time-limit``, ``cancelled``..."""
        return self.task_share(job_id) / f"stop-{role}-{index}-{attempt}"

    def run_dir(self, job_id: str) -> Path:
        """Where tasks' attempts keep their records (``.pid``, ``.exit``; each backend
        reads its own kinds back)."""
        return self.job_dir(job_id) / "run"

    def record(self, job_id: str, role: str, index: int, attempt: int) -> Path:
        """The record prefix of one attempt (0 = first start) of a task."""
        return self.run_dir(job_id) / f"{role}-{index}-{attempt}"
