"""The chief: waits for every worker's mark in the shared volume, then succeeds."""

import json
import os
import time

data = os.environ["DATA"]
workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    done = [name for name in os.listdir(data) if name.endswith("-done")]
    if len(done) == workers:
        print(f"chief: all {workers} workers done", flush=True)
        break
    time.sleep(0.2)
else:
    raise SystemExit("chief: the workers did not finish")
