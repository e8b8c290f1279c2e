"""Runs one-task jobs one after another through a server's engine; prints each outcome.

``python port_jobs.py DATA_DIR COUNT REPLICAS``: each job has REPLICAS tasks, each of which
binds and listens on its port (``TRAINFLEET_PORT``), so a port handed out twice, or one
still in use, fails the job. Exits 0 once all COUNT jobs have succeeded, 1 at the first
that did not.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainfleet.control.engine import Engine
from trainfleet.spec.models import JobSpec
from trainfleet.store.layout import DataDir
from trainfleet.store.records import State

LISTEN = (
    "import os, socket; s = socket.socket();"
    " s.bind(('127.0.0.1', int(os.environ['TRAINFLEET_PORT']))); s.listen()"
)


def main(data: Path, count: int, replicas: int) -> int:
    worker = {"replicas": replicas, "command": ["python", "-S", "-c", LISTEN]}
    spec = JobSpec.model_validate({"name": "port", "roles": {"worker": worker}})
    engine = Engine(DataDir(data), supervised=True)
    try:
        for number in range(count):
            job = engine.submit(spec, data.parent, start=True)
            ended = engine.wait(job.id)
            print(f"{number} {job.id} {ended.state} {ended.reason}", flush=True)
            if ended.state != State.SUCCEEDED:
                return 1
    finally:
        engine.shutdown()
        engine.store.close()
    print("all succeeded", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
