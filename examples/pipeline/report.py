"""Step report-failure (when: failure): says which step failed, from what the steps left in
the run's folder."""

import os

run_dir = os.environ["TRAINFLEET_RUN_DIR"]
if not os.path.exists(os.path.join(run_dir, "data.npz")):
    failed = "prepare"
elif not os.path.exists(os.path.join(run_dir, "weights.json")):
    failed = "train"
else:
    failed = "evaluate"
print(f"pipeline failed at step {failed}; its files are in {run_dir}")
