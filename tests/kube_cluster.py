"""The test Kubernetes cluster (``scripts/k8s.sh``): its kubeconfig. Without
``TRAINFLEET_TEST_KUBECONFIG`` Kubernetes tests skip, except under CI (``CI`` set), where
they fail: CI never skips them."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from helpers import missing

KUBECONFIG = "TRAINFLEET_TEST_KUBECONFIG"
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "k8s.sh"


def kubeconfig() -> str:
    found = os.environ.get(KUBECONFIG)
    if found:
        return found
    start = f"export {KUBECONFIG}=$(bash {SCRIPT} start | tail -n1)"
    missing(f"the Kubernetes cluster: {KUBECONFIG} is not set (run: {start})")


def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl`` of the cluster (its own, beside its kubeconfig: k8s.sh's layout) with
    ``args``, against the test cluster."""
    config = Path(kubeconfig())
    own = config.parent.parent / "bin" / "kubectl"
    program = str(own) if own.exists() else shutil.which("kubectl")
    if program is None:
        missing(f"kubectl (neither {own} nor on PATH)")
    return subprocess.run(
        [program, "--kubeconfig", str(config), *args], capture_output=True, text=True, timeout=60
    )
