"""The test container image (``scripts/images.sh build``, from Debian packages: no registry
is reachable here). Without podman or the image, container tests skip saying so, except
under CI (``CI`` set), where they fail: CI builds the image first."""

from __future__ import annotations

import shutil
import subprocess
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
