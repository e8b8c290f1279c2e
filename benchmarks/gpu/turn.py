"""A whole-GPU task that records when it held its GPU: ``turn.py NAME`` writes
``turn-NAME.txt`` (start, end, CUDA_VISIBLE_DEVICES) after holding it for 3 seconds."""

import os
import sys
import time

started = time.time()
time.sleep(3)
with open(f"turn-{sys.argv[1]}.txt", "w") as handle:
    handle.write(f"{started} {time.time()} {os.environ.get('CUDA_VISIBLE_DEVICES', '')}\n")
