"""The test Kubernetes cluster (``scripts/k8s.sh``): its kubeconfig. Without
``TRAINFLEET_TEST_KUBECONFIG`` Kubernetes tests skip, except under CI (``CI`` set), where
they fail: CI never skips them."""

from __future__ import annotations

import os
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
