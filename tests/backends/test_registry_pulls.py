"""Pull policies against a real registry: Debian's ``docker-registry`` serving on 127.0.0.1
(no other registry is reachable here), with the base image pushed to it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from container_images import base_image
from helpers import missing

from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec

DROP_IN = Path("/etc/containers/registries.conf.d")


@dataclass(frozen=True)
class Registry:
    """A registry on 127.0.0.1 that holds ``image``; ``log`` lists the requests it served."""

    image: str
    log: Path

    def manifest_pulls(self) -> int:
        """How many times a client asked for the image's manifest (one per pull)."""
        tag = self.image.rsplit(":", 1)[1]
        return sum(
            1
            for line in self.log.read_text().splitlines()
            if "GET /v2/" in line and f"/manifests/{tag}" in line
        )


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    base = base_image()
    program = shutil.which("docker-registry")
    if program is None:
        missing("docker-registry (bash scripts/images.sh build installs it)")
    folder = tmp_path_factory.mktemp("registry")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    where = f"127.0.0.1:{port}"
    config = folder / "config.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  accesslog:\n    disabled: false\n"
        f"storage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
        f"http:\n  addr: {where}\n"
    )
    drop_in = DROP_IN / f"trainfleet-test-{port}.conf"
    try:
        DROP_IN.mkdir(parents=True, exist_ok=True)
        drop_in.write_text(f'[[registry]]\nlocation = "{where}"\ninsecure = true\n')
    except PermissionError:
        missing(f"write access to {DROP_IN} (root), to let podman use a plain-HTTP registry")
    log = folder / "registry.log"
    with log.open("wb") as output:
        server = subprocess.Popen([program, "serve", str(config)], stdout=output, stderr=output)
    image = f"{where}/trainfleet/python:3.11"
    try:
        _wait_until_up(f"http://{where}/v2/")
        push = ["podman", "push", "--quiet", "--tls-verify=false", base, image]
        subprocess.run(push, check=True, capture_output=True, timeout=300)
        yield Registry(image, log)
    finally:
        server.terminate()
        server.wait(timeout=30)
        drop_in.unlink(missing_ok=True)
        subprocess.run(["podman", "rmi", "--force", image], check=False, capture_output=True)


def _wait_until_up(url: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the registry at {url} did not come up")
        time.sleep(0.1)


def _forget(image: str) -> None:
    subprocess.run(["podman", "rmi", "--force", image], check=False, capture_output=True)


def _present(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], check=False).returncode == 0


def _run(engine: Engine, tmp_path: Path, image: str, pull: str, replicas: int = 1) -> str:
    spec = JobSpec.model_validate(
        {
            "name": "pulls",
            "roles": {
                "worker": {"image": image, "pull": pull, "replicas": replicas, "command": "true"}
            },
        }
    )
    return engine.submit(spec, tmp_path, start=True).id


def test_if_missing_pulls_an_absent_image_once(
    engine: Engine, tmp_path: Path, registry: Registry
) -> None:
    _forget(registry.image)
    before = registry.manifest_pulls()
    job = _run(engine, tmp_path, registry.image, "if-missing", replicas=2)
    assert engine.wait(job, timeout=180).state == State.SUCCEEDED, engine.describe(job)
    assert _present(registry.image)
    assert registry.manifest_pulls() - before == 1  # two tasks, one image: one pull
    job = _run(engine, tmp_path, registry.image, "if-missing")
    assert engine.wait(job, timeout=180).state == State.SUCCEEDED, engine.describe(job)
    assert registry.manifest_pulls() - before == 1  # present now: taken as it is


def test_always_pulls_at_every_start(engine: Engine, tmp_path: Path, registry: Registry) -> None:
    before = registry.manifest_pulls()
    for _ in range(2):
        job = _run(engine, tmp_path, registry.image, "always")
        assert engine.wait(job, timeout=180).state == State.SUCCEEDED, engine.describe(job)
    assert registry.manifest_pulls() - before == 2


def test_never_fails_an_absent_image_without_asking(
    engine: Engine, tmp_path: Path, registry: Registry
) -> None:
    _forget(registry.image)
    before = registry.manifest_pulls()
    ended = engine.wait(_run(engine, tmp_path, registry.image, "never"), timeout=180)
    assert ended.state == State.FAILED
    assert f"image {registry.image!r} not found locally (pull: never)" in ended.reason
    assert registry.manifest_pulls() == before


def test_an_image_the_registry_lacks_fails_with_the_registry_s_words(
    engine: Engine, tmp_path: Path, registry: Registry
) -> None:
    absent = registry.image.replace(":3.11", ":0.0")
    ended = engine.wait(_run(engine, tmp_path, absent, "if-missing"), timeout=180)
    assert ended.state == State.FAILED
    (task,) = engine.tasks(ended.id)
    assert task.code == Code.COULD_NOT_START
    assert f"image {absent!r} not found locally and pull failed: " in task.reason
    assert "manifest unknown" in task.reason, task.reason
