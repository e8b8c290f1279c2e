"""Images through pyxis (``slurm: {containers: pyxis}``) on the real Slurm test cluster.

pyxis (NVIDIA's SPANK plugin) and enroot cannot be installed here (neither is in Debian), so
an ``srun`` first on PATH stands in for the plugin alone: it writes down the options it was
given and runs the real srun without the ``--container-*`` ones (with an image's PATH, as
enroot gives the container its image's ENV), so the task runs on its node but not in the
image. Everything else is real: the second step on the task's own node, the
task's environment reaching it, its exit code, stop and the attempt's processes ending.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import trainfleet, wait_for
from slurm_cluster import SlurmUser
from test_slurm_jobs import _ended, _running, _slurm_processes, _submit, job_id_in

pytestmark = pytest.mark.slow

STAND_IN = """\
#!{python}
# Stands in for pyxis: writes the options down, runs the real srun without --container-*.
import json, os, sys
args = sys.argv[1:]
if any(arg.startswith("--container-") for arg in args):
    with open({log!r}, "a") as log:
        log.write(json.dumps(args) + "\\n")
    # The container's environment starts from its image's ENV (here: a Debian image's PATH).
    os.environ.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
kept = [arg for arg in args if not arg.startswith("--container-")]
os.execv({srun!r}, [{srun!r}, *kept])
"""


@pytest.fixture
def pyxis_user(slurm_user: SlurmUser, tmp_path: Path) -> SlurmUser:
    """The Slurm user, with ``containers: pyxis`` and the stand-in srun first on PATH."""
    config = Path(slurm_user.env["XDG_CONFIG_HOME"]) / "trainfleet" / "config.yaml"
    config.write_text(config.read_text().replace("slurm:\n", "slurm:\n  containers: pyxis\n"))
    srun = shutil.which("srun", path=slurm_user.env["PATH"])
    assert srun is not None
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "srun"
    stand_in.write_text(
        STAND_IN.format(python=sys.executable, log=str(tmp_path / "srun.log"), srun=srun)
    )
    stand_in.chmod(0o755)
    slurm_user.env["PATH"] = f"{bin_dir}:{slurm_user.env['PATH']}"
    return slurm_user


def pyxis_calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "srun.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_task_with_an_image_runs_in_a_pyxis_step_on_its_node(
    pyxis_user: SlurmUser, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(
        textwrap.dedent(f"""\
            name: pyxis
            image: registry.example.org/team/train:2
            roles:
              worker:
                replicas: 2
                command: "sh -c 'echo on $SLURMD_NODENAME as $TRAINFLEET_INDEX in $PWD; exit 3'"
                mounts: [{{source: {tmp_path / "data"}, target: /data, read_only: true}}]
            """)
    )
    done = subprocess.run(
        trainfleet("run", job), env=pyxis_user.env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stdout + done.stderr
    details = pyxis_user.describe(job_id_in(done.stdout))
    tasks = details["tasks"]
    assert isinstance(tasks, list) and [task["exit_code"] for task in tasks] == [3, 3], tasks
    calls = pyxis_calls(tmp_path)
    assert len(calls) == 2, calls
    for index, task in enumerate(tasks):
        node = task["address"].rpartition(":")[0]
        (call,) = [c for c in calls if f"--nodelist={node}" in c]
        assert "--overlap" in call
        assert "--container-image=registry.example.org/team/train:2" in call
        (mounts,) = [a.split("=", 1)[1] for a in call if a.startswith("--container-mounts=")]
        share = pyxis_user.data_dir / "jobs" / job_id_in(done.stdout) / "tasks"
        assert mounts.split(",") == [
            f"{tmp_path}:{tmp_path}",
            f"{tmp_path / 'data'}:/data:ro",
            f"{share}:{share}",
        ]
        assert f"--container-workdir={tmp_path}" in call
        assert call[call.index("--") + 1 :][:2] == ["/bin/sh", "-c"]
        said = re.findall(rf"worker/{index}\s*\| (.*)", done.stdout)
        assert f"on {node} as {index} in {tmp_path}" in said, done.stdout


def test_stop_ends_a_pyxis_step(pyxis_user: SlurmUser, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: pyxis-stop\nimage: img:1\nroles:\n  worker: {command: sleep 611}\n")
    job_id = _submit(pyxis_user, job)
    wait_for(lambda: _running(pyxis_user, job_id), timeout=120, what="the job to run")
    # slurmstepd runs the program by its full path.
    task = f"{shutil.which('sleep')} 611"
    wait_for(lambda: _slurm_processes(task), timeout=60, what="the task")
    subprocess.run(trainfleet("stop", job_id), env=pyxis_user.env, check=True, timeout=120)
    details = wait_for(lambda: _ended(pyxis_user, job_id), timeout=120, what="the job to end")
    assert isinstance(details, dict) and details["job"]["state"] == "cancelled", details
    wait_for(lambda: not _slurm_processes(task), timeout=30, what="its end")
    assert len(pyxis_calls(tmp_path)) == 1
