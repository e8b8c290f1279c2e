"""Unhealthy GPUs: marked from what NVML reports, kept free of new tasks, cleared by an
operator or by NVML reporting them well again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_nvml import FakeNvml, fake_nvml
from helpers import wait_for

from trainfleet.backends.gpu_readings import GpuReading
from trainfleet.backends.local import processes
from trainfleet.backends.local.nvml_read import read_gpus
from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine
from trainfleet.control.gpu_health import GpuHealth
from trainfleet.domain.errors import NotFound
from trainfleet.spec.loading import load_job_text
from trainfleet.spec.models import JobSpec

ECC = "ecc: 2 uncorrected memory error(s) since the driver loaded"


class Reader:
    """The backend's reading, through a fake NVML (no GPU runs here)."""

    def __init__(self, nvml: FakeNvml) -> None:
        self.nvml = nvml

    def read_gpus(self) -> list[GpuReading]:
        return read_gpus(self.nvml, list(range(len(self.nvml.gpus))))


def test_health_follows_nvml_and_the_operator(tmp_path: Path) -> None:
    """A fake NVML (no GPU runs here): an ECC error marks GPU 0; clearing ignores that
    count; a higher count marks it again; when NVML reports it well, it is well and the
    cleared problem is forgotten (so that it counts when it comes back)."""
    nvml = fake_nvml(2)
    health = GpuHealth(tmp_path, Reader(nvml), clock=lambda: 0.0)
    assert [look.healthy for look in health.look()] == [True, True]
    nvml.gpus[0].ecc_uncorrected = 2
    looks = health.look()
    assert looks[0].problems == (ECC,) and looks[1].healthy
    assert health.unhealthy() == {0}
    cleared = health.clear(0, by="ops")
    assert cleared.healthy and cleared.cleared is not None and cleared.cleared.by == "ops"
    assert health.unhealthy() == frozenset()
    assert GpuHealth(tmp_path, Reader(nvml)).unhealthy() == frozenset(), "kept on disk"
    nvml.gpus[0].ecc_uncorrected = 3
    assert health.look()[0].problems == (
        "ecc: 3 uncorrected memory error(s) since the driver loaded",
    )
    nvml.gpus[0].ecc_uncorrected = 0
    assert health.look()[0].healthy and health.look()[0].cleared is None
    nvml.gpus[0].lost = True
    assert not health.look()[0].healthy


def test_an_xid_makes_its_gpu_unhealthy_until_an_operator_clears_it(tmp_path: Path) -> None:
    """A fake NVML (no GPU runs here) reports Xid 79 of GPU 1 once: every reader of the data
    directory counts GPU 1 unhealthy from then on, though no later reading shows it, until
    an operator clears it; an application's own Xid (31) changes nothing."""
    nvml = fake_nvml(2)
    backend = processes.LocalBackend(gpus="0,1", nvml=nvml)
    health = GpuHealth(tmp_path, backend, clock=lambda: 0.0)
    assert health.unhealthy() == frozenset()
    nvml.report_xid(1, 79)
    nvml.report_xid(0, 31)
    looks = {look.reading.index: look for look in health.look()}
    assert looks[1].problems == ("xid 79: fell off the bus (NVML event)",)
    assert looks[0].healthy
    assert health.look()[1].problems, "kept: the event is told only once"
    other = GpuHealth(tmp_path, processes.LocalBackend(gpus="0,1", nvml=fake_nvml(2)))
    assert other.unhealthy() == frozenset({1}), "another process of the data directory agrees"
    assert health.clear(1, by="ops").healthy
    assert health.unhealthy() == frozenset() and other.look()[1].healthy


def test_clearing_a_gpu_that_is_not_here_is_not_found(tmp_path: Path) -> None:
    health = GpuHealth(tmp_path, Reader(fake_nvml(1)))
    with pytest.raises(NotFound, match="no GPU 3 here"):
        health.clear(3)
    assert GpuHealth(tmp_path, None).unhealthy() == frozenset()


@pytest.fixture
def sick_gpu_engine(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """An engine of two GPUs, GPU 0 reporting uncorrected ECC errors (a fake NVML: no
    GPU runs here)."""
    nvml = fake_nvml(2)
    nvml.gpus[0].ecc_uncorrected = 2
    monkeypatch.setenv("TRAINFLEET_GPUS", "0,1")
    monkeypatch.setattr(processes, "load_nvml", lambda: nvml)
    engine = engine_at(data_dir)
    yield engine
    engine.shutdown()  # its jobs' controllers end before the store closes
    engine.store.close()


def _submit(engine: Engine, name: str) -> str:
    text = f"name: {name}\nroles:\n  worker: {{command: 'sleep 60', resources: {{gpu: 1}}}}\n"
    spec = load_job_text(text, "job.yaml").spec
    return engine.submit(spec, engine.data_dir.root, start=True).id


def _gpus_of(engine: Engine, job_id: str) -> str | None:
    task = engine.tasks(job_id)[0]
    return task.gpus if task.state == "running" else None


def test_nothing_new_is_placed_on_an_unhealthy_gpu_until_it_is_cleared(
    sick_gpu_engine: Engine,
) -> None:
    """A fake NVML (no GPU runs here) says GPU 0 has ECC errors: a job of one GPU runs on
    GPU 1, the next waits though GPU 0 is free; cleared, GPU 0 takes it."""
    engine = sick_gpu_engine
    first = _submit(engine, "first")
    wait_for(lambda: _gpus_of(engine, first), 30, "the first job running")
    assert _gpus_of(engine, first) == "1"
    second = _submit(engine, "second")
    wait_for(lambda: engine.get(second).waiting, 30, "the second job waiting")
    assert engine.get(second).state == "queued"
    engine.clear_gpu(0, by="ops")
    wait_for(lambda: _gpus_of(engine, second), 30, "the second job running")
    assert _gpus_of(engine, second) == "0"


def _ecc_errors(nvml: FakeNvml) -> None:
    nvml.gpus[0].ecc_uncorrected = 2


def _fell_off_the_bus(nvml: FakeNvml) -> None:
    nvml.report_xid(0, 79)


@pytest.mark.parametrize("turns_unhealthy", [_ecc_errors, _fell_off_the_bus])
def test_a_job_on_a_gpu_that_turns_unhealthy_is_queued_again_and_runs_on_a_healthy_one(
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    turns_unhealthy: Callable[[FakeNvml], None],
) -> None:
    """A fake NVML (no GPU runs here): a job runs on GPU 0, which then reports ECC errors
    (a state) or Xid 79 (an event, told once). Its task is told why (`gpu-unhealthy` in its
    stop file) and stopped; the job goes back to its queue with that code and runs again on
    GPU 1, which is well."""
    nvml = fake_nvml(2)
    monkeypatch.setenv("TRAINFLEET_GPUS", "0,1")
    monkeypatch.setattr(processes, "load_nvml", lambda: nvml)
    engine = engine_at(data_dir)
    told = tmp_path / "told"
    command = (
        f"trap 'cat \"$TRAINFLEET_STOP_FILE\" >> {told}; exit 143' TERM; "
        "echo on $CUDA_VISIBLE_DEVICES; while :; do sleep 0.1; done"
    )
    spec = JobSpec.model_validate(
        {"name": "sick", "roles": {"worker": {"command": command, "resources": {"gpu": 1}}}}
    )
    job = engine.submit(spec, tmp_path, start=True).id
    try:
        wait_for(lambda: _gpus_of(engine, job) == "0", 30, "the job running on GPU 0")
        turns_unhealthy(nvml)
        wait_for(lambda: _gpus_of(engine, job) == "1", 30, "the job running again on GPU 1")
        codes = [event.code for event in engine.store.list_events(job)]
        assert "gpu-unhealthy" in codes, codes
        queued = [e for e in engine.store.list_events(job) if e.code == "gpu-unhealthy"]
        assert any("GPU 0 (worker/0) unhealthy" in e.message for e in queued), queued
        assert told.read_text().split() == ["gpu-unhealthy"]
    finally:
        engine.shutdown()
        engine.store.close()
