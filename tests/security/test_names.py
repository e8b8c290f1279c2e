"""Names that become paths are safe by construction: one rule (``spec.names``) for secret
names and keys, queue, team and job names and mount targets, at the API, in job files and
in Kubeflow manifests; a refusal names the field. A secret key ``..`` was accepted before,
and a job asking for it as a file was left ``starting`` for ever (issue 23)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server.harness import LiveServer
from spec.test_spec_kubeflow import TFJOB  # a manifest of the Kubeflow tests

from trainfleet.spec.errors import SpecError
from trainfleet.spec.loading import load_job_text
from trainfleet.spec.names import file_name

API = "/api/v1"
NOT_NAMES = ["", ".", "..", "a/b", "../x", "a\0b", "x" * 254]


@pytest.mark.parametrize("value", NOT_NAMES)
def test_no_file_name_is_a_path_or_empty(value: str) -> None:
    with pytest.raises(ValueError, match="invalid name"):
        file_name(value)


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    server = LiveServer(tmp_path_factory.mktemp("names") / "data").start()
    headers = {"Authorization": f"Bearer {server.token}"}
    try:
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            yield client
    finally:
        server.stop()


def _problem(response: httpx.Response) -> tuple[str, str]:
    """The field and message of a 422 (a body's fields are named in its ``detail``)."""
    assert response.status_code == 422, response.text
    answer = response.json()
    if not answer["problems"]:
        field, _, message = answer["detail"].partition(": ")
        return field.removeprefix("body."), message
    return answer["problems"][0]["field"], answer["problems"][0]["message"]


@pytest.mark.parametrize("key", [".", "..", "a/b", "x" * 254])
def test_the_api_refuses_a_secret_key_that_is_no_file_name(http: httpx.Client, key: str) -> None:
    response = http.post(f"{API}/secrets", json={"name": "wandb", "data": {key: "v"}})
    field, message = _problem(response)
    assert field.startswith("data") and "invalid key" in message, (field, message)
    assert http.get(f"{API}/secrets").json() == []  # nothing stored


@pytest.mark.parametrize(
    ("fragment", "field"),
    [
        ("env: {T: {secret: wandb, key: '..', file: true}}", "env.T.key"),
        ("env: {T: {secret: wandb, key: '.'}}", "env.T.key"),
        ("env: {T: {secret: '..', key: k}}", "env.T.secret"),
        ("queue: '..'", "queue"),
    ],
)
def test_the_api_refuses_a_job_naming_a_path(http: httpx.Client, fragment: str, field: str) -> None:
    text = f"name: names\n{fragment}\nroles:\n  worker: {{command: 'true'}}\n"
    response = http.post(f"{API}/jobs", content=text, headers={"Content-Type": "application/yaml"})
    found, _ = _problem(response)
    assert found.startswith(field), (found, response.text)
    assert http.get(f"{API}/jobs").json()["jobs"] == []


def test_a_job_file_refuses_dot_dot_in_a_key_and_a_mount_target() -> None:
    bad = {
        "env: {T: {secret: s, key: '..', file: true}}": "env.T.key",
        "image: python:3.11\nroles:\n  worker:\n    command: 'true'\n"
        "    mounts: [{source: data, target: /data/../etc}]\n": "roles.worker.mounts[0].target",
    }
    for fragment, field in bad.items():
        roles = "" if "roles:" in fragment else "roles:\n  worker: {command: 'true'}\n"
        with pytest.raises(SpecError) as raised:
            load_job_text(f"name: names\n{fragment}\n{roles}", "job.yaml")
        assert field in str(raised.value), str(raised.value)


def test_a_kubeflow_secret_key_ref_is_held_to_the_same_rule(tmp_path: Path) -> None:
    ref = "- name: EMPTY\n                  valueFrom: {secretKeyRef: {name: s3, key: '..'}}"
    with pytest.raises(SpecError) as raised:
        load_job_text(TFJOB.replace("- name: EMPTY", ref), "job.yaml")
    message = str(raised.value)
    assert "containers[1].env[1]" in message and "'..'" in message, message
    assert json.dumps("..")  # the manifest itself was read: only the key is refused
