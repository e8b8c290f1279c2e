"""``--backend`` (or ``TRAINFLEET_BACKEND``) picks where this machine's engine runs jobs,
over the config file's ``backend``; a bad name or an unusable cluster is exit 2, naming
where it was given, and nothing is stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

JOB = "name: hello\nroles:\n  worker: {command: echo hi, image: localhost/x:1}\n"


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.yaml").write_text(JOB)
    environ = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "HOME": str(tmp_path),
        "TRAINFLEET_DATA_DIR": str(tmp_path / "data"),
        **env,
    }
    environ.pop("KUBECONFIG", None)
    argv = [sys.executable, "-m", "trainfleet", *args]
    return subprocess.run(argv, cwd=tmp_path, env=environ, capture_output=True, text=True)


def test_a_backend_that_does_not_exist_is_named(tmp_path: Path) -> None:
    ran = _run(tmp_path, "--backend", "yarn", "run", "job.yaml")
    assert ran.returncode == 2
    assert ran.stderr.startswith("error: --backend: Input should be 'local', 'slurm' or")
    ran = _run(tmp_path, "run", "job.yaml", TRAINFLEET_BACKEND="yarn")
    assert ran.returncode == 2 and ran.stderr.startswith("error: TRAINFLEET_BACKEND: ")


def test_the_flag_wins_over_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config" / "trainfleet" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("backend: local\nkubernetes: {host_paths: true}\n")
    ran = _run(tmp_path, "--backend", "kubernetes", "run", "job.yaml")
    assert ran.returncode == 2, ran.stderr
    assert f"kubeconfig {tmp_path}/.kube/config: no such file" in ran.stderr
    assert "Traceback" not in ran.stderr
    listed = _run(tmp_path, "list")
    assert listed.returncode == 0 and "hello" not in listed.stdout, "nothing is stored"
