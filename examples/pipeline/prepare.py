"""Step prepare: a synthetic dataset, y = 2x + 10 plus noise, in the run's folder."""

import os

import numpy as np

rng = np.random.default_rng(seed=0)
x = rng.uniform(-1, 1, size=(1024, 1)).astype("float32")
y = (2 * x + 10 + rng.normal(0, 0.1, size=x.shape)).astype("float32")
path = os.path.join(os.environ["TRAINFLEET_RUN_DIR"], "data.npz")
np.savez(path, x=x, y=y)
print(f"wrote {len(x)} examples to {path}")
