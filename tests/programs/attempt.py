"""A task for crash tests: journals its start, waits for a file, journals its end, exits.

usage: attempt.py JOURNAL GO_FILE EXIT_CODE
"""

import os
import sys
import time
from pathlib import Path

journal, go, code = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
name = f"{os.environ['TRAINFLEET_ROLE']}/{os.environ['TRAINFLEET_INDEX']}"
with journal.open("a") as out:
    out.write(f"start {name} {os.getpid()}\n")
while not go.exists():
    time.sleep(0.05)
with journal.open("a") as out:
    out.write(f"end {name} {os.getpid()}\n")
sys.exit(code)
