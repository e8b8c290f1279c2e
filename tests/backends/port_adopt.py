"""A server's engine that dies with a job running, then the next one that adopts it.

``python port_adopt.py DATA_DIR first``: runs a job whose task holds its port without
binding it (a sleeper), and ends this process at once, as kill -9 would.
``python port_adopt.py DATA_DIR second``: adopts that job, runs a one-task job (which finds
no free port in a one-port range while the adopted job holds it), stops the adopted job,
and runs the one-task job again (its port has come free). Prints each outcome.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from port_jobs import LISTEN

from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec

SLEEPER = JobSpec.model_validate({"name": "held", "roles": {"worker": {"command": "sleep 600"}}})
LISTENING = {"command": ["python", "-S", "-c", LISTEN.format(options="")]}
LISTENER = JobSpec.model_validate({"name": "port", "roles": {"worker": LISTENING}})


def first(engine: Engine) -> None:
    job = engine.submit(SLEEPER, engine.data_dir.root.parent, start=True)
    while engine.tasks(job.id)[0].state != State.RUNNING:
        engine.wait_ended(job.id, timeout=0.05)
    print(f"running {job.id} at {engine.tasks(job.id)[0].address}", flush=True)
    os._exit(0)  # no shutdown: the task runs on, as when the server is killed


def second(engine: Engine) -> None:
    [held] = engine.resume()
    print(f"adopted {held}", flush=True)
    for number in range(2):
        job = engine.submit(LISTENER, engine.data_dir.root.parent, start=True)
        ended = engine.wait(job.id)
        print(f"{number} {ended.state} {ended.reason}", flush=True)
        if number == 0:
            engine.cancel(held)
            print(f"stopped {held}: {engine.wait(held).state}", flush=True)


if __name__ == "__main__":
    engine = engine_at(Path(sys.argv[1]), supervised=True)
    {"first": first, "second": second}[sys.argv[2]](engine)
    engine.store.close()
