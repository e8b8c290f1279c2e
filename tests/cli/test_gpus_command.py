"""``trainfleet gpus``: this machine's GPUs as a table and as JSON, a job's task on its
GPU, and ``gpus clear``; bad input exits 2 with a message, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from fake_nvml import FakeNvml, fake_nvml
from helpers import wait_for

from trainfleet.backends.local import processes
from trainfleet.cli.main import cli
from trainfleet.control.assembly import engine_at
from trainfleet.spec.loading import load_job_text


@pytest.fixture
def nvml(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """Two GPUs through a fake NVML (no GPU runs here), GPU 1 with ECC errors; the CLI
    runs in this process to hear it."""
    fake = fake_nvml(2)
    fake.gpus[1].ecc_uncorrected = 4
    monkeypatch.setenv("TRAINFLEET_GPUS", "0,1")
    monkeypatch.setattr(processes, "load_nvml", lambda: fake)
    return fake


def _cli(*args: str) -> Result:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def holder(nvml: FakeNvml, data_dir: Path) -> Iterator[str]:
    """A running job of half a GPU (counted sharing: no MPS here), on GPU 0."""
    engine = engine_at(data_dir)
    engine.backend.gpu_sharing = processes.GpuSharing.COUNTED  # type: ignore[attr-defined]
    text = "name: half\nroles:\n  worker: {command: 'sleep 60', resources: {gpu: 0.5}}\n"
    job = engine.submit(load_job_text(text, "job.yaml").spec, data_dir, start=True).id
    wait_for(lambda: engine.tasks(job)[0].state == "running", 30, "the job running")
    yield job
    engine.cancel(job)
    engine.shutdown()
    engine.store.close()


def test_the_table_and_json_show_each_gpu_its_health_and_its_tasks(holder: str) -> None:
    """A fake NVML (no GPU runs here): model, memory, use, temperature, health, and the
    half-GPU task as ``job/role/index (0.5)``."""
    table = _cli("gpus")
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split() == ["GPU", "MODEL", "MEMORY", "UTIL", "TEMP", "HEALTH", "TASKS"]
    assert "NVIDIA H200" in lines[1] and "2.0/141.0 GiB" in lines[1] and "37%" in lines[1]
    assert "healthy" in lines[1] and "half/worker/0 (0.5)" in lines[1]
    assert "unhealthy: ecc: 4 uncorrected" in lines[2]
    shown = json.loads(_cli("gpus", "list", "-o", "json").output)
    assert [gpu["healthy"] for gpu in shown] == [True, False]
    assert shown[0]["holders"] == [{"task": "half/worker/0", "job_id": holder, "share": 0.5}]
    assert shown[0]["temperature"] == 41 and shown[0]["memory_total"] == 141 << 30


def test_clear_marks_a_gpu_healthy_and_bad_indices_are_refused(nvml: FakeNvml) -> None:
    """A fake NVML (no GPU runs here)."""
    cleared = _cli("gpus", "clear", "1", "-o", "json")
    assert cleared.exit_code == 0, cleared.output
    (gpu,) = json.loads(cleared.output)
    assert gpu["healthy"] and gpu["cleared"] == [
        "ecc: 4 uncorrected memory error(s) since the driver loaded"
    ]
    assert json.loads(_cli("gpus", "-o", "json").output)[1]["healthy"]
    missing = _cli("gpus", "clear", "7")
    assert missing.exit_code != 0 and "no GPU 7 here (GPUs: 0, 1)" in missing.output
    for bad in ("x", "-1"):
        refused = _cli("gpus", "clear", bad)
        assert refused.exit_code == 2 and "INDEX" in refused.output, refused.output


def test_a_machine_without_gpus_says_so(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINFLEET_GPUS", "")
    shown = _cli("gpus")
    assert shown.exit_code == 0 and "no GPUs here" in shown.output
