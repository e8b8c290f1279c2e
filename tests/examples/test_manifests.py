"""Kubeflow manifests as users write them (``tests/manifests/``) run unmodified with
``trainfleet run``, in images built here on top of ``scripts/images.sh``'s: a program that
lives only in the image, args for the image's ENTRYPOINT, a restart policy per replica type
and ``hostPath`` volumes."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from container_images import base_image
from helpers import run_cli
from test_examples import run_example, task_output

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
IMAGES = {
    "localhost/trainfleet-test/tf-mnist:1": MANIFESTS / "images" / "tensorflow",
    "localhost/trainfleet-test/torch-examples:1": MANIFESTS / "images" / "torch",
}
SHARED = Path("/tmp/trainfleet-manifest-tests")  # the manifests' hostPath

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def images() -> Iterator[None]:
    """The manifests' images, built from the local framework images (never pulled)."""
    base_image()
    for name, folder in IMAGES.items():
        build = ["podman", "build", "--pull=never", "--quiet", "--tag", name, str(folder)]
        built = subprocess.run(build, capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stderr
    yield
    for name in IMAGES:
        subprocess.run(["podman", "rmi", "--force", name], check=False, capture_output=True)


def test_a_program_that_lives_only_in_the_image(images: None, tmp_path: Path) -> None:
    stdout = run_example(MANIFESTS / "tfjob-command-in-image.yaml", tmp_path)
    said = task_output(stdout, "worker/0")
    found = [re.search(r"worker 0: epochs=3 accuracy=([\d.]+)", line) for line in said]
    accuracy = [float(match[1]) for match in found if match]
    assert accuracy and accuracy[-1] > 0.9, stdout


def test_args_alone_go_to_the_image_entrypoint(images: None, tmp_path: Path) -> None:
    stdout = run_example(MANIFESTS / "pytorchjob-args-only.yaml", tmp_path)
    for rank, task in enumerate(["master/0", "worker/0", "worker/1"]):
        # Three rounds of 1 + 2 + 3 over three ranks.
        assert f"rank {rank} of 3: sum=18 after 3 rounds" in task_output(stdout, task), stdout


def test_a_restart_policy_per_replica_type_and_host_path_volumes(
    images: None, tmp_path: Path
) -> None:
    shutil.rmtree(SHARED, ignore_errors=True)
    SHARED.mkdir()
    try:
        stdout = run_example(MANIFESTS / "tfjob-restart-per-replica.yaml", tmp_path)
    finally:
        marks = sorted(path.name for path in SHARED.iterdir())
        shutil.rmtree(SHARED, ignore_errors=True)
    for index in (0, 1):  # each worker failed once, was restarted (OnFailure), then done
        said = task_output(stdout, f"worker/{index}")
        assert said == [
            f"worker {index}: failing on purpose",
            f"worker {index}: done after a restart",
        ]
    assert task_output(stdout, "chief/0") == ["chief: all 2 workers done"]
    assert marks == ["worker-0-done", "worker-0-failed", "worker-1-done", "worker-1-failed"]
    shown = run_cli("run", "--dry-run", MANIFESTS / "tfjob-restart-per-replica.yaml")
    assert shown.returncode == 0, shown.stderr
    assert (
        "warning: spec.tfReplicaSpecs.Chief.template.spec.volumes[1]: emptyDir volume "
        "'scratch' is not supported here (only hostPath): its mount at /scratch is left out"
    ) in shown.stderr
