"""Fixtures of the backends' tests: images made for a test from the base image."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from subprocess import PIPE

import pytest
from container_images import base_image


@pytest.fixture(scope="module")
def workdir_image() -> Iterator[str]:
    """The base image with a program in /app and WORKDIR /app, as upstream examples ship."""
    base, name = base_image(), f"trainfleet-workdir-{os.getpid()}"
    image = f"localhost/trainfleet-test/workdir:{os.getpid()}"
    write = "mkdir /app && echo 'import os; print(\"in\", os.getcwd())' > /app/train.py"
    made = ["podman", "run", "--name", name, "--network", "host", base, "sh", "-c", write]
    subprocess.run(made, check=True, stdout=PIPE)
    commit = ["podman", "commit", "--quiet", "--change=WORKDIR /app", name, image]
    subprocess.run(commit, check=True, stdout=PIPE)
    subprocess.run(["podman", "rm", name], check=True, stdout=PIPE)
    yield image
    subprocess.run(["podman", "rmi", "--force", image], check=False, stdout=PIPE)
