"""The test container image (``scripts/images.sh build``, from Debian packages: no registry
is reachable here). Without podman or the image, container tests skip saying so, except
under CI (``CI`` set), where they fail: CI builds the image first."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from helpers import missing

BASE_IMAGE = "localhost/trainfleet/python:3.11"
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "images.sh"


def base_image() -> str:
    """The base image's name, once podman and the image are here."""
    podman = shutil.which("podman")
    present = podman is not None and (
        subprocess.run([podman, "image", "exists", BASE_IMAGE], check=False).returncode == 0
    )
    if present:
        return BASE_IMAGE
    missing(f"podman and the image {BASE_IMAGE} (run: bash {SCRIPT} build)")


CDI_SPEC = Path("/var/run/cdi/trainfleet-test-gpus.yaml")


@contextlib.contextmanager
def fake_cdi_gpus(count: int = 8) -> Iterator[None]:
    """A CDI spec of GPUs ``nvidia.com/gpu=0`` to ``count - 1`` that are no devices at all:
    each only sets ``FAKE_GPU_<n>=yes`` in the container it is given to. No GPU can be had
    here; this shows which devices the runtime gave each container, through podman's own
    CDI support."""
    devices = "".join(
        f'  - name: "{n}"\n    containerEdits:\n      env: ["FAKE_GPU_{n}=yes"]\n'
        for n in range(count)
    )
    try:
        CDI_SPEC.parent.mkdir(parents=True, exist_ok=True)
        CDI_SPEC.write_text(f'cdiVersion: "0.5.0"\nkind: nvidia.com/gpu\ndevices:\n{devices}')
    except PermissionError:
        missing(f"write access to {CDI_SPEC.parent} (root), for the fake GPUs' CDI spec")
    try:
        yield
    finally:
        CDI_SPEC.unlink(missing_ok=True)
