"""Admission beside other processes' jobs: each of their jobs is counted once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from trainfleet.control import local_admission
from trainfleet.control.engine import Engine
from trainfleet.spec.models import JobSpec


def test_a_job_seen_in_two_holding_states_is_held_once(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that goes from starting to running between the reads of each holding state is
    found twice; held twice, its GPUs would stay taken here after it ended (a second
    `trainfleet run` of `gpu: 1` waited for good, found by scripts/gpu-check.sh)."""
    spec = JobSpec.model_validate(yaml.safe_load("name: other\nroles:\n  w: {command: 'true'}\n"))
    other = engine.submit(spec, tmp_path)
    found = SimpleNamespace(jobs=[other])
    monkeypatch.setattr(engine.store, "find_jobs", lambda **_: found)
    assert [job.id for job in local_admission.holders(engine, "mine")] == [other.id]
