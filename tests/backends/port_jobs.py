"""Runs jobs one after another through a server's engine; prints each outcome.

``python port_jobs.py DATA_DIR COUNT REPLICAS [TIME_WAIT_PORT]``: each job has REPLICAS
tasks, each of which binds and listens on its port (``TRAINFLEET_PORT``), so a port handed
out twice, or one still in use, fails the job. With TIME_WAIT_PORT, a connection to that
port is served and closed first, so that the port waits in TIME_WAIT, and the tasks bind
with SO_REUSEADDR, as servers do. Exits 0 once all COUNT jobs have succeeded, 1 at the
first that did not.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from trainfleet.control.assembly import engine_at
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec

LISTEN = (
    "import os, socket; s = socket.socket(); {options}"
    "s.bind(('127.0.0.1', int(os.environ['TRAINFLEET_PORT']))); s.listen()"
)
REUSE = "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "


def leave_in_time_wait(port: int) -> None:
    """Serve one connection on ``port`` and close it first: the port's end waits in
    TIME_WAIT (a minute on Linux); nothing listens on the port any more."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        with socket.create_connection(("127.0.0.1", port)) as client:
            served, _ = listener.accept()
            served.close()
            client.recv(1)  # the served end's FIN


def main(data: Path, count: int, replicas: int, time_wait: int | None) -> int:
    if time_wait is not None:
        leave_in_time_wait(time_wait)
    listen = LISTEN.format(options=REUSE if time_wait is not None else "")
    worker = {"replicas": replicas, "command": ["python", "-S", "-c", listen]}
    spec = JobSpec.model_validate({"name": "port", "roles": {"worker": worker}})
    engine = engine_at(data, supervised=True)
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
    numbers = [int(word) for word in sys.argv[2:]]
    sys.exit(main(Path(sys.argv[1]), numbers[0], numbers[1], (numbers[2:] or [None])[0]))
