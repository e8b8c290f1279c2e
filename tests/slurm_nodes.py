"""The test Slurm cluster (``scripts/slurm.sh``): where its slurm.conf is, and its nodes
back in service between tests. Without ``TRAINFLEET_TEST_SLURM_CONF`` Slurm tests skip,
except under CI (``CI`` set), where they fail: CI never skips them."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from helpers import missing

SLURM_CONF = "TRAINFLEET_TEST_SLURM_CONF"
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm.sh"
NODES = ("tf-node1", "tf-node2", "tf-node3")


def slurm_conf() -> str:
    conf = os.environ.get(SLURM_CONF)
    if conf:
        return conf
    start = f"export {SLURM_CONF}=$(bash {SCRIPT} start)"
    missing(f"the Slurm cluster: {SLURM_CONF} is not set (run: {start})")


def wait_until_idle(env: Mapping[str, str], timeout: float = 120) -> None:
    """Every node back in service (a test may have killed one) and none of them busy."""
    deadline = time.monotonic() + timeout
    while True:
        states = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True, text=True
        ).stdout.split("\n")
        nodes = dict(line.split() for line in states if line.strip())
        if all(nodes.get(node, "").rstrip("*") == "idle" for node in NODES):
            return
        for node in NODES:
            if nodes.get(node, "").endswith("*") or "down" in nodes.get(node, ""):
                subprocess.run(["bash", str(SCRIPT), "node-start", node], env=env)
        if time.monotonic() > deadline:
            pytest.fail(f"the Slurm nodes are not all idle: {nodes}")
        time.sleep(1)
