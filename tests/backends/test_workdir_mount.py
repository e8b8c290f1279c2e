"""The job's folder mounted where the job file says (``workdir_mount``): its launch, the
runtimes' command lines (podman here and on Slurm nodes, pyxis), the dry run, the Kubeflow
export, and real containers that read and write the folder there.

The rule (README, docs/decisions.md): the job's folder is mounted at its own path unless
``workdir_mount`` names another absolute path; a container runs in the job's folder
(wherever mounted) only for a job file that names no ``working_dir`` and no
``image_workdir``; a relative ``working_dir`` is taken inside the mounted folder.
"""

from __future__ import annotations

import marshal
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from container_images import base_image
from helpers import run_cli, trainfleet

from trainfleet.backends.launch import JobLaunch, Mount, TaskLaunch
from trainfleet.backends.slurm import commands
from trainfleet.backends.slurm.backend import SlurmBackend
from trainfleet.backends.slurm.pyxis import pyxis_argv
from trainfleet.backends.supervision.containers import Containers
from trainfleet.datadir.layout import DataDir
from trainfleet.scheduling.placement import Placement, TaskKey, TaskSlot, task_keys
from trainfleet.spec.backends import SlurmConfig
from trainfleet.spec.kubeflow_export import manifest_of
from trainfleet.spec.models import JobSpec

WORKER: TaskKey = ("worker", 0)


def _job(tmp_path: Path, spec: dict[str, Any]) -> JobLaunch:
    job = JobSpec.model_validate({"name": "mounted", **spec})
    slots = tuple(
        TaskSlot(*key, "127.0.0.1", 40000 + n, ()) for n, key in enumerate(task_keys(job))
    )
    workdir = tmp_path / "job"
    workdir.mkdir(exist_ok=True)
    attempts = dict.fromkeys(task_keys(job), 0)
    return JobLaunch(
        "mounted-1", job, Placement(slots), workdir, DataDir(tmp_path / "data"), attempts
    )


def _task(tmp_path: Path, key: TaskKey = WORKER, **role: object) -> TaskLaunch:
    spec = {
        "image": "i:1",
        "workdir_mount": "/workspace",
        "checkpoint_path": "ckpt",
        "tensorboard": {"logdir": "tb"},
        "roles": {"worker": {"command": "python3 train.py", **role}},
    }
    return _job(tmp_path, spec).task(key)


def test_the_job_s_folder_is_mounted_there_and_the_task_runs_there(tmp_path: Path) -> None:
    launch = _task(tmp_path)
    workdir = tmp_path / "job"
    assert launch.mounts[0] == Mount(workdir, Path("/workspace"))
    assert launch.cwd == Path("/workspace") and launch.host_cwd == workdir
    # The paths trainfleet gives the task name the folder where the task sees it.
    assert launch.env["TRAINFLEET_CHECKPOINT_PATH"] == "/workspace/ckpt"
    assert launch.env["TRAINFLEET_TENSORBOARD_DIR"] == "/workspace/tb"
    assert str(workdir) not in " ".join(launch.env.values())
    assert _task(tmp_path, working_dir="sub").cwd == Path("/workspace/sub")
    assert _task(tmp_path, working_dir="/app").cwd == Path("/app")
    board = _task(tmp_path, ("tensorboard", 0))  # trainfleet's own service: here, no image
    assert board.image is None and board.cwd == workdir and board.host_cwd is None
    assert board.env["TRAINFLEET_TENSORBOARD_DIR"] == str(workdir / "tb")


def test_without_workdir_mount_the_folder_is_at_its_own_path(tmp_path: Path) -> None:
    launch = _job(tmp_path, {"image": "i:1", "roles": {"worker": {"command": "x"}}}).task(WORKER)
    workdir = tmp_path / "job"
    assert launch.mounts[0] == Mount(workdir, workdir) and launch.cwd == workdir
    plain = _job(tmp_path, {"roles": {"worker": {"command": "x"}}}).task(WORKER)
    assert plain.cwd == workdir and plain.host_cwd is None


def test_a_folder_outside_the_job_s_folder_keeps_its_path(tmp_path: Path) -> None:
    """A checkpoint or TensorBoard folder named by its absolute path: in the job's folder,
    where the task sees that folder; elsewhere (or a URL), as written."""
    inside = str(tmp_path / "job" / "runs" / "tb")
    for path, logdir, seen, seen_logdir in [
        ("/shared/ckpt", inside, "/shared/ckpt", "/workspace/runs/tb"),
        ("s3://bucket/ckpt", "/shared/tb", "s3://bucket/ckpt", "/shared/tb"),
    ]:
        spec = {
            "image": "i:1",
            "workdir_mount": "/workspace",
            "checkpoint_path": path,
            "tensorboard": {"logdir": logdir},
            "roles": {"worker": {"command": "x"}},
        }
        env = _job(tmp_path, spec).task(WORKER).env
        assert env["TRAINFLEET_CHECKPOINT_PATH"] == seen
        assert env["TRAINFLEET_TENSORBOARD_DIR"] == seen_logdir


def test_podman_and_pyxis_mount_it_there_and_run_there(tmp_path: Path) -> None:
    workdir = tmp_path / "job"
    launch = _task(tmp_path, working_dir="sub")
    argv = Containers("/usr/bin/podman").argv(launch, "trainfleet-mounted-1-worker-0-0")
    joined = " ".join(argv)
    assert f"--volume {workdir}:/workspace " in joined and "--workdir /workspace/sub " in joined
    assert f"{workdir}:{workdir}" not in joined
    pyxis = pyxis_argv(launch, node="node-1")
    mounts = next(a for a in pyxis if a.startswith("--container-mounts=")).split("=", 1)[1]
    assert mounts.split(",")[0] == f"{workdir}:/workspace"
    assert "--container-workdir=/workspace/sub" in pyxis


def test_a_slurm_launch_file_runs_the_runtime_in_the_folder_and_the_task_where_mounted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch file a Slurm job's bootstraps read (sbatch stands in: no cluster is
    needed to write it): each node's runtime starts in the job's folder, its container runs
    in the folder where mounted, and the bootstrap knows the container's name."""
    monkeypatch.setattr(commands, "sbatch", lambda script: "4242")
    spec = {"image": "i:1", "workdir_mount": "/workspace", "roles": {"worker": {"command": "x"}}}
    for containers in ("runtime", "pyxis"):
        backend = SlurmBackend(SlurmConfig(containers=containers), container_runtime="podman")
        job = _job(tmp_path, spec)
        backend._submit(job)
        (launch_file,) = job.data_dir.run_dir(job.job_id).glob("start-*.launch")
        task = marshal.loads(launch_file.read_bytes())["tasks"]["worker/0"]
        launch_file.unlink()
        assert task["cwd"] == str(tmp_path / "job"), containers
        argv = " ".join(task["argv"])
        if containers == "runtime":
            assert task["container"] == "trainfleet-mounted-1-worker-0-0"
            assert f"--volume {tmp_path / 'job'}:/workspace " in argv
            assert "--workdir /workspace " in argv
        else:
            assert task["container"] is None
            assert f"--container-mounts={tmp_path / 'job'}:/workspace" in argv
            assert "--container-workdir=/workspace " in argv


def test_the_dry_run_shows_where_the_task_runs_and_a_bad_mount_is_refused(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: m\nimage: train:1\nworkdir_mount: /workspace\nroles:\n  w: {command: x}\n"
    )
    shown = run_cli("run", "--dry-run", job)
    assert shown.returncode == 0, shown.stderr
    assert "w/0  x  (in /workspace, image train:1)" in shown.stdout.splitlines()
    job.write_text("name: m\nimage: train:1\nroles:\n  w: {command: x, workdir_mount: ws}\n")
    refused = run_cli("run", "--dry-run", job)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith(f"error: {job}:4: roles.w.workdir_mount: path 'ws' must ")
    assert "Traceback" not in refused.stderr


def test_the_kubeflow_export_says_it_leaves_the_folder_out(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(
        {
            "name": "m",
            "framework": "pytorch",
            "image": "train:1",
            "workdir_mount": "/workspace",
            "roles": {
                "master": {"command": "x"},
                "worker": {"command": "x", "workdir_mount": "/w"},
            },
        }
    )
    manifest, left_out = manifest_of(spec)
    assert "not exported: workdir_mount /workspace: the job's folder is not exported" in " ".join(
        left_out
    )
    assert any(line.startswith("not exported: roles.worker.workdir_mount /w:") for line in left_out)
    assert "/workspace" not in str(manifest), "a pod has no job folder to mount"


def test_a_container_reads_and_writes_the_job_s_folder_where_it_is_mounted(
    tmp_path: Path, workdir_image: str
) -> None:
    """A real podman run of a job file with ``workdir_mount: /workspace``: the program reads
    a file of the job's folder by its relative path, runs in /workspace, and what it writes
    there is in the job's folder; a role with a relative working_dir runs inside it, one with
    an absolute working_dir (/app: a folder of the image only, not of this machine) there,
    and one with image_workdir in its image's WORKDIR (/app), the folder still at /workspace."""
    image = base_image()
    folder = tmp_path / "job"
    (folder / "sub").mkdir(parents=True)
    (folder / "data.txt").write_text("from the job's folder\n")
    (folder / "sub" / "inner.txt").write_text("inner\n")
    show = "pwd; cat {file}; echo $TRAINFLEET_CHECKPOINT_PATH; echo written > out-$TRAINFLEET_ROLE"
    (folder / "job.yaml").write_text(
        textwrap.dedent(f"""\
            name: mounted
            image: {image}
            workdir_mount: /workspace
            checkpoint_path: ckpt
            roles:
              worker: {{command: [sh, -c, "{show.format(file="data.txt")}"]}}
              inner: {{working_dir: sub, command: [sh, -c, "{show.format(file="inner.txt")}"]}}
              elsewhere:
                image: {workdir_image}
                working_dir: /app
                command: [sh, -c, "pwd; cat /workspace/data.txt"]
              inimage:
                image: {workdir_image}
                image_workdir: true
                command: [sh, -c, "pwd; ls; cat /workspace/data.txt"]
            """)
    )
    assert not Path("/app").exists(), "the task's folder must be the image's alone"
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        trainfleet("run", folder / "job.yaml"), env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr

    def said(role: str) -> list[str]:
        prefix = f"{role}/0 "
        return [
            line.split("| ", 1)[1] for line in done.stdout.splitlines() if line.startswith(prefix)
        ]

    assert said("worker") == ["/workspace", "from the job's folder", "/workspace/ckpt"]
    assert said("inner") == ["/workspace/sub", "inner", "/workspace/ckpt"]
    assert said("elsewhere") == ["/app", "from the job's folder"]
    assert said("inimage") == ["/app", "train.py", "from the job's folder"]
    assert (folder / "out-worker").read_text() == "written\n"
    assert (folder / "sub" / "out-inner").read_text() == "written\n"
