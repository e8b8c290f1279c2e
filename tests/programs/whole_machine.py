"""A task for tests that needs the whole machine: notes when it runs, in a shared file.

usage: whole_machine.py LOG NAME SECONDS [--until-preempted]

Appends ``NAME start`` and ``NAME end`` to LOG. With --until-preempted, the first run
(``TRAINFLEET_RESTART`` 0) waits for SIGTERM, notes ``NAME sigterm:<why>`` (why from
``$TRAINFLEET_STOP_FILE``; a checkpoint would be written here) and exits 143; a later run
(the job after its requeue, told so by ``TRAINFLEET_RESTART``) finishes like the others.
"""

import os
import signal
import sys
import time
from pathlib import Path

log, name, seconds = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
until_preempted = "--until-preempted" in sys.argv
first_run = os.environ["TRAINFLEET_RESTART"] == "0"


def note(event: str) -> None:
    with log.open("a") as out:
        out.write(f"{name} {event} {time.time():.3f}\n")


def on_sigterm(*_: object) -> None:
    note(f"sigterm:{Path(os.environ['TRAINFLEET_STOP_FILE']).read_text().strip()}")
    sys.exit(143)


signal.signal(signal.SIGTERM, on_sigterm)
note("start")
print(f"{name} running", flush=True)
if until_preempted and first_run:
    while True:
        time.sleep(0.05)
time.sleep(seconds)
note("end")
