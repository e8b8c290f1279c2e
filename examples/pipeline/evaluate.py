"""Step evaluate: the fitted line's mean squared error on the prepared data; exit 1 when it
is above --max-loss (the workflow's parameter max_loss)."""

import argparse
import json
import os
import sys

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--max-loss", type=float, required=True)
max_loss = parser.parse_args().max_loss

run_dir = os.environ["TRAINFLEET_RUN_DIR"]
data = np.load(os.path.join(run_dir, "data.npz"))
with open(os.path.join(run_dir, "weights.json")) as file:
    weights = json.load(file)

loss = float(np.mean((weights["w"] * data["x"] + weights["b"] - data["y"]) ** 2))
passed = loss <= max_loss
print(f"loss={loss:.4f} max_loss={max_loss:g}: {'passed' if passed else 'too high'}")
# The job's own output, read back with `trainfleet logs JOB --output metrics.json`.
with open(os.path.join(os.environ["TRAINFLEET_OUTPUT_DIR"], "metrics.json"), "w") as file:
    json.dump({"loss": loss, "max_loss": max_loss, "passed": passed}, file)
sys.exit(0 if passed else 1)
