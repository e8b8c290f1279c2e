"""A server's engine on the simulated backend, killed with -9 while it runs three jobs.

``python sim_adopt.py DATA_DIR``: submits a job whose task runs until stopped, one whose
task ends a second after its start, and one whose task waits four seconds for a place;
once the first two run and the third waits, prints their ids (JSON) and kills itself with
SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from trainfleet.backends.simulated import SIM_VARIABLE, SimulatedBackend
from trainfleet.control.assembly import engine_at
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec

RUNNING, STARTING = State.RUNNING.value, State.STARTING.value


def _spec(plan: dict[str, float]) -> JobSpec:
    worker = {"command": "true", "env": {SIM_VARIABLE: json.dumps(plan)}}
    return JobSpec.model_validate({"name": "adopted", "roles": {"worker": worker}})


if __name__ == "__main__":
    engine = engine_at(Path(sys.argv[1]), supervised=True, backend=SimulatedBackend())
    plans = [{}, {"runs": 1.0}, {"pending": 4.0}]
    jobs = [engine.submit(_spec(plan), Path.cwd(), start=True).id for plan in plans]
    deadline = time.monotonic() + 60
    while [engine.tasks(job_id)[0].state for job_id in jobs] != [RUNNING, RUNNING, STARTING]:
        assert time.monotonic() < deadline, "the jobs never ran"
        time.sleep(0.02)
    print(json.dumps(jobs), flush=True)  # the third one handed to the backend too
    os.kill(os.getpid(), signal.SIGKILL)
