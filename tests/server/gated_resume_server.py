"""`trainfleet server` on the simulated backend, whose resume waits for a file.

``python gated_resume_server.py GATE --data-dir DIR server [options]``: the real CLI serves
as ``trainfleet server`` does, but the backend holds each adopted job's ports (which a
resume does with the admission lock held) only once the file ``GATE`` exists: a test sees
the server while its resume is under way, for as long as it likes. A gate that says
``fail`` makes the resume fail instead. Each adoption of a task takes ``ADOPT_SECONDS``
more: a server that said it was ready before its jobs' tasks were adopted would be seen.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from trainfleet.backends.api import Address, TaskHandle, TaskReports
from trainfleet.backends.simulated import SimulatedBackend
from trainfleet.cli.main import cli
from trainfleet.control import assembly
from trainfleet.datadir.layout import DataDir
from trainfleet.scheduling.placement import TaskKey

ADOPT_SECONDS = 0.5


class GatedBackend(SimulatedBackend):
    """The simulation, whose ``hold`` waits for ``gate`` to exist (and fails if it says
    ``fail``)."""

    def __init__(self, gate: Path) -> None:
        super().__init__()
        self.gate = gate

    def hold(self, job_id: str, addresses: Mapping[TaskKey, Address]) -> None:
        while not self.gate.exists():
            time.sleep(0.02)
        if self.gate.read_text() == "fail":
            raise OSError("the simulated engine is gone")
        super().hold(job_id, addresses)

    def adopt(
        self, data_dir: DataDir, job_id: str, key: TaskKey, attempt: int, reports: TaskReports
    ) -> TaskHandle | None:
        time.sleep(ADOPT_SECONDS)
        return super().adopt(data_dir, job_id, key, attempt, reports)


if __name__ == "__main__":
    gate, rest = Path(sys.argv[1]), sys.argv[2:]
    backend = GatedBackend(gate)
    assembly.server_engine = functools.partial(assembly.server_engine, backend=backend)
    cli(args=rest, prog_name="trainfleet")
