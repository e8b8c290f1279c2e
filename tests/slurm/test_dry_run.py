"""``trainfleet run --dry-run`` with ``backend: slurm``: the batch script and each task's
environment, with the hosts and GPUs Slurm decides shown as such. It asks nothing of Slurm
(no cluster is needed: ``SLURM_CONF`` names none), and stores and submits nothing."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import textwrap
from pathlib import Path

from helpers import trainfleet

JOB = """
name: mnist
framework: tensorflow
roles:
  chief: {command: python train.py, resources: {cpu: 2, gpu: 1}}
  worker: {replicas: 2, command: python train.py, resources: {cpu: 2, gpu: 1}}
  ps: {command: trainfleet tf-server, resources: {memory: 3Gi}}
"""


def dry_run(tmp_path: Path, job: str, sinfo: str | None = None) -> subprocess.CompletedProcess[str]:
    """``sinfo``: what a stand-in ``sinfo`` on the PATH answers (else Slurm's own finds no
    cluster)."""
    config = tmp_path / "config" / "trainfleet" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("backend: slurm\nslurm: {partition: gpu, spread: true}\n")
    job_file = tmp_path / "job.yaml"
    job_file.write_text(textwrap.dedent(job))
    env = {
        **os.environ,
        "SLURM_CONF": str(tmp_path / "no-cluster.conf"),
        "XDG_CONFIG_HOME": str(config.parent.parent),
        "TRAINFLEET_DATA_DIR": str(tmp_path / "data"),
    }
    if sinfo is not None:
        fake = tmp_path / "bin" / "sinfo"
        fake.parent.mkdir()
        fake.write_text(f"#!/bin/sh\nprintf '%s' {shlex.quote(sinfo)}\n")
        fake.chmod(0o755)
        env["PATH"] = f"{fake.parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        trainfleet("run", "--dry-run", job_file), env=env, capture_output=True, text=True
    )


def test_dry_run_shows_the_batch_script_and_tasks_on_nodes_to_come(tmp_path: Path) -> None:
    done = dry_run(tmp_path, JOB)
    assert done.returncode == 0, done.stderr
    tasks, _, script = done.stdout.partition("submitted as\n")
    assert script.startswith("#!/bin/bash\n#SBATCH --job-name=trainfleet-mnist-dryrun\n")
    assert len(re.findall(r"(?m)^#SBATCH --ntasks=.* --partition=gpu$", script)) == 2, script
    assert "#SBATCH --ntasks=3 --cpus-per-task=2 --mem-per-cpu=512M --gpus-per-task=1" in script
    assert "#SBATCH hetjob\n#SBATCH --ntasks=1 --cpus-per-task=1 --mem-per-cpu=3072M" in script
    assert len(re.findall(r"(?m)^srun --het-group=\d .* &$", script)) == 2

    worker = re.search(r"(?s)^worker/1  python train.py .*?(?=^\S)", tasks, re.MULTILINE)
    assert worker, tasks
    environment = dict(re.findall(r"(?m)^  (\w+)=(.*)$", worker[0]))
    tf_config = json.loads(environment["TF_CONFIG"])
    assert re.fullmatch(r"<node of ps/0>:\d+", tf_config["cluster"]["ps"][0])
    assert all(
        address.startswith(f"<node of worker/{n}>:")
        for n, address in enumerate(tf_config["cluster"]["worker"])
    )
    assert environment["CUDA_VISIBLE_DEVICES"] == "<from Slurm>"
    ps = re.search(r"(?s)^ps/0  .*", tasks, re.MULTILINE)
    assert ps and "CUDA_VISIBLE_DEVICES=\n" in ps[0]
    assert not (tmp_path / "data" / "jobs").exists()


HALF = "name: half\nroles:\n  worker: {command: 'true', resources: {gpu: 0.5}}\n"


def test_dry_run_shows_a_fraction_as_the_shards_slurm_has(tmp_path: Path) -> None:
    """The one question a dry run asks Slurm, for a fraction: how many shards a GPU has
    (a stand-in sinfo says 4)."""
    done = dry_run(tmp_path, HALF, sinfo="tf-node1|gpu:2,shard:8|gpu\n")
    assert done.returncode == 0, done.stderr
    tasks, _, script = done.stdout.partition("submitted as\n")
    assert "#SBATCH --ntasks=1 --cpus-per-task=1 --mem-per-cpu=" in script
    assert re.search(
        r"(?m)^#SBATCH --ntasks=1 .* --gres=shard:2 --spread-job --partition=gpu$", script
    ), script
    assert re.search(r"(?m)^srun --ntasks=1 .* --gres=shard:2 .* &$", script), script
    assert (
        "TRAINFLEET_GPU_FRACTION=0.5\n" in tasks and "CUDA_VISIBLE_DEVICES=<from Slurm>\n" in tasks
    )


def test_dry_run_shows_the_shards_to_come_where_slurm_does_not_answer(tmp_path: Path) -> None:
    done = dry_run(tmp_path, HALF)
    assert done.returncode == 0, done.stderr
    shown = "--gres=shard:<0.5 x the shards per GPU, from Slurm>"
    assert f"#SBATCH --ntasks=1 --cpus-per-task=1 --mem-per-cpu=1024M {shown} " in done.stdout


def test_dry_run_refuses_a_fraction_where_the_cluster_has_no_shards(tmp_path: Path) -> None:
    done = dry_run(tmp_path, HALF, sinfo="tf-node1|gpu:2|gpu\n")
    assert done.returncode == 2, done.stdout
    assert re.match(
        r"error: roles\.worker\.resources\.gpu: 0\.5 is a fraction of a GPU, which Slurm gives"
        r" as GPU shards, and partition gpu has no shards configured",
        done.stderr,
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_an_mpi_job_is_refused_with_what_to_run_instead(tmp_path: Path) -> None:
    job = "name: pi\nframework: mpi\nroles:\n  launcher: {command: mpirun prog}\n  worker: {}\n"
    done = dry_run(tmp_path, job)
    assert done.returncode == 2, done.stdout
    assert done.stderr.startswith("error: framework: mpi runs on the local backend only")
    assert "srun --mpi=pmix" in done.stderr


def test_a_notebook_is_refused_until_slurm_can_serve_one(tmp_path: Path) -> None:
    done = dry_run(tmp_path, "name: nb\nnotebook: true\n")
    assert done.returncode == 2, done.stdout
    assert done.stderr.startswith("error: notebook: notebooks run on the local backend only")
