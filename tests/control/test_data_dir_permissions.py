"""The data directory is private: its root 0700, every file trainfleet writes there 0600."""

from __future__ import annotations

import stat
from pathlib import Path

import yaml
from helpers import run_cli

from trainfleet.control.assembly import engine_at
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec


def _modes(root: Path) -> dict[str, int]:
    """Permission bits of every file under ``root``, by relative path."""
    return {
        str(path.relative_to(root)): stat.S_IMODE(path.stat().st_mode)
        for path in root.rglob("*")
        if path.is_file()
    }


def test_a_supervised_job_leaves_only_owner_only_files(tmp_path: Path, reap: Path) -> None:
    """The database, its WAL, logs and the shim's records; an existing 0755 root is tightened."""
    root = tmp_path / "data"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    engine = engine_at(root, supervised=True)
    try:
        spec = JobSpec.model_validate(
            yaml.safe_load("name: secret\nroles:\n  worker: {command: echo token=s3cr3t}\n")
        )
        job = engine.submit(spec, tmp_path)
        engine.start(job.id)
        assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
        modes = _modes(root)
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        assert "trainfleet.db-wal" in modes and f"jobs/{job.id}/logs/worker-0.log" in modes
        assert any(name.endswith(".exit") for name in modes), modes
        assert {name: mode for name, mode in modes.items() if mode != 0o600} == {}
    finally:
        engine.store.close()


def test_an_embedded_run_creates_a_private_data_dir(job_file, data_dir: Path) -> None:
    """``trainfleet run`` with no data directory yet: root 0700, files 0600 (runner's too)."""
    result = run_cli("run", job_file("name: hi\nroles:\n  worker: {command: echo hi}\n"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    modes = _modes(data_dir)
    assert "trainfleet.db" in modes and any(name.endswith(".log") for name in modes)
    assert {name: mode for name, mode in modes.items() if mode != 0o600} == {}
