"""``trainfleet queue`` as a user types it, on the embedded engine, and ``server --queues``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli


def test_create_list_and_describe_a_queue(data_dir: Path) -> None:
    created = run_cli(
        "queue", "create", "team-a", "--cohort", "research",
        "--nominal", "cpu=4,memory=16Gi,gpu=2,licence=1", "--borrowing-limit", "gpu=1",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert "team-a" in created.stdout and "licence 1" in created.stdout

    listed = run_cli("queue", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    queues = {queue["queue"]["name"]: queue for queue in json.loads(listed.stdout)}
    assert set(queues) == {"default", "team-a"}
    team = queues["team-a"]["queue"]
    assert team["cohort"] == "research"
    assert team["nominal"] == {
        "cpu": "4",
        "memory": 16 * 2**30,
        "gpu": 2.0,
        "custom": {"licence": 1},
    }
    assert team["borrowing_limit"]["gpu"] == 1.0

    described = run_cli("queue", "describe", "team-a", "-o", "yaml")
    assert described.returncode == 0 and "cohort: research" in described.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Team"], "error: name: invalid name 'Team'"),
        (["t", "--nominal", "gpu"], "error: --nominal: 'gpu': expected name=amount, e.g. gpu=8"),
        (["t", "--nominal", "gpu=1,gpu=2"], "error: --nominal: 'gpu=2': gpu is given twice"),
        (["t", "--nominal", "memory=lots"], "error: --nominal: memory: cannot parse memory 'lots'"),
        (
            ["t", "--borrowing-limit", "gpu=-1"],
            "error: --borrowing-limit: gpu: must be at least 0, got '-1'",
        ),
        (["t", "--cohort", "A B"], "error: cohort: invalid name 'A B'"),
    ],
)
def test_bad_queue_flags_are_named(data_dir: Path, args: list[str], message: str) -> None:
    result = run_cli("queue", "create", *args)
    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_queue_and_bad_queues_file(data_dir: Path, tmp_path: Path) -> None:
    missing = run_cli("queue", "describe", "nope")
    assert (missing.returncode, missing.stderr) == (
        2,
        "error: no queue 'nope' (see trainfleet queue list)\n",
    )
    bad = tmp_path / "queues.yaml"
    bad.write_text("queues:\n  - name: ok\n    nominal: {gpu: many}\n")
    result = run_cli("server", "--port", "0", "--queues", bad)
    assert result.returncode == 2
    assert "queues.yaml:3: queues[0].nominal.gpu:" in result.stderr, result.stderr


def test_custom_resources_of_this_machine(
    data_dir: Path, job_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Named resources come from TRAINFLEET_RESOURCES; a job asking for more is refused."""
    job = job_file(
        "name: licensed\nroles:\n  w: {command: 'true', resources: {custom: {licence: 2}}}\n"
    )
    monkeypatch.setenv("TRAINFLEET_RESOURCES", "licence=2, fpga=1")
    assert run_cli("run", job).returncode == 0
    monkeypatch.setenv("TRAINFLEET_RESOURCES", "licence=1")
    refused = run_cli("run", job)
    assert refused.returncode == 2
    assert "error: a task asks for licence 2 and no node has that much" in refused.stderr
    monkeypatch.setenv("TRAINFLEET_RESOURCES", "licence")
    bad = run_cli("run", job)
    assert bad.returncode == 2
    assert "TRAINFLEET_RESOURCES: 'licence': expected name=count" in bad.stderr
