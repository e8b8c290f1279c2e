"""Runs jobs with supervised tasks until it is killed, as a server would (crash tests).

usage: engine_host.py DATA_DIR JOB_FILE...
Prints each submitted job's id, then "ready", then waits to be killed.
"""

import sys
import time
from pathlib import Path

from trainfleet.control.assembly import engine_at
from trainfleet.spec.loading import load_job_file

engine = engine_at(Path(sys.argv[1]), supervised=True)
for name in sys.argv[2:]:
    job = engine.submit(load_job_file(name).spec, Path(name).resolve().parent)
    engine.start(job.id)
    print(job.id, flush=True)
print("ready", flush=True)
while True:
    time.sleep(60)
