"""A worker that fails its first attempt, and succeeds once restarted (marks in DATA)."""

import json
import os
import sys

data, index = os.environ["DATA"], json.loads(os.environ["TF_CONFIG"])["task"]["index"]
first = os.path.join(data, f"worker-{index}-failed")
if not os.path.exists(first):
    open(first, "w").close()
    print(f"worker {index}: failing on purpose", flush=True)
    sys.exit(1)
open(os.path.join(data, f"worker-{index}-done"), "w").close()
print(f"worker {index}: done after a restart", flush=True)
