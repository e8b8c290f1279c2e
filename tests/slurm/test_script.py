"""The batch script a job becomes (pure: no cluster needed)."""

from __future__ import annotations

import doctest
import math
import shlex
from pathlib import Path

import pytest

from trainfleet.backends.slurm import script as script_module
from trainfleet.backends.slurm.commands import _gpus
from trainfleet.backends.slurm.script import NotForSlurm, batch_script, components
from trainfleet.spec.backends import SlurmConfig
from trainfleet.spec.models import JobSpec

SPEC = JobSpec.model_validate(
    {
        "name": "mnist",
        "roles": {
            "chief": {"command": "python train.py", "resources": {"cpu": 2, "gpu": 1}},
            "worker": {
                "replicas": 2,
                "command": "python train.py",
                "resources": {"cpu": 2, "gpu": 1},
            },
            "ps": {"command": "trainfleet tf-server", "resources": {"memory": "3Gi"}},
        },
    }
)
KEYS = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]
STEP = ["python", "-I", "-S", "/opt/bootstrap.py", "/data/run/start-1.json"]


def script(keys: list[tuple[str, int]], config: SlurmConfig, spec: JobSpec = SPEC) -> str:
    return batch_script(
        "trainfleet-mnist-1",
        components(spec, keys, config),
        config,
        Path("/o/%j.out"),
        STEP,
        warn_before=spec.grace_period,
    )


def test_docstrings() -> None:
    assert doctest.testmod(script_module).failed == 0


def test_one_component_and_one_step_per_shape() -> None:
    config = SlurmConfig(partition="gpu", account="ml", time_limit="1-00:00:00", spread=True)
    text = script(KEYS, config)
    directives = [
        line[len("#SBATCH ") :] for line in text.splitlines() if line.startswith("#SBATCH")
    ]
    assert directives[:8] == [
        "--job-name=trainfleet-mnist-1",
        "--output=/o/%j.out",
        "--open-mode=append",
        "--no-requeue",
        "--partition=gpu",
        "--account=ml",
        "--time=1-00:00:00",
        f"--signal=TERM@{math.ceil(SPEC.grace_period)}",  # time to save before the limit
    ]
    assert directives[8:] == [
        "--ntasks=3 --cpus-per-task=2 --mem-per-cpu=512M --gpus-per-task=1 --spread-job",
        "hetjob",
        "--ntasks=1 --cpus-per-task=1 --mem-per-cpu=3072M --spread-job",
    ]
    steps = [
        shlex.split(line.rstrip(" &")) for line in text.splitlines() if line.startswith("srun")
    ]
    assert steps == [
        [
            "srun",
            "--het-group=0",
            "--ntasks=3",
            "--cpus-per-task=2",
            "--mem-per-cpu=512M",
            "--gpus-per-task=1",
            *STEP,
            "0",
        ],
        [
            "srun",
            "--het-group=1",
            "--ntasks=1",
            "--cpus-per-task=1",
            "--mem-per-cpu=3072M",
            *STEP,
            "1",
        ],
    ]
    assert text.rstrip().endswith("wait")


def test_tasks_of_a_component_in_step_order() -> None:
    assert components(SPEC, KEYS, SlurmConfig())[0][1] == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
    ]


def test_a_plain_job_when_all_tasks_are_alike() -> None:
    text = script(KEYS[1:3], SlurmConfig())
    assert "hetjob" not in text and "--het-group" not in text
    assert "--partition" not in text and "--spread-job" not in text
    assert "--signal" not in text  # no time limit to warn of


def test_fractions_of_a_gpu_are_refused_by_name() -> None:
    spec = JobSpec.model_validate(
        {"name": "half", "roles": {"worker": {"command": "x", "resources": {"gpu": 0.5}}}}
    )
    with pytest.raises(NotForSlurm, match=r"roles\.worker\.resources\.gpu: 0\.5 is a fraction"):
        script([("worker", 0)], SlurmConfig(), spec)


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [("(null)", 0), ("gpu:2", 2), ("gpu:a100:4(S:0-1)", 4), ("gpu:1,gpu:v100:2,license:3", 3)],
)
def test_gpus_of_a_node(gres: str, gpus: int) -> None:
    assert _gpus(gres) == gpus


@pytest.mark.parametrize(
    ("state", "cause", "said"),
    [
        ("PREEMPTED", "preempted", "Slurm preempted job 7"),
        ("TIMEOUT", "node-lost", "Slurm job 7 reached its time limit"),
        ("OUT_OF_MEMORY", "node-lost", "Slurm job 7 ended OUT_OF_MEMORY"),
    ],
)
def test_what_slurm_did_to_a_job_is_an_infrastructure_failure(
    state: str, cause: str, said: str
) -> None:
    """Pure: the backend's reading of a job's state, without a cluster (a stand-in for
    the backend and the task: only the fields it reads)."""
    from types import SimpleNamespace

    from trainfleet.backends.slurm.backend import SlurmBackend
    from trainfleet.backends.slurm.commands import SlurmJob

    backend = SimpleNamespace(_cancelled=set(), _failed_nodes=SlurmBackend._failed_nodes)
    task = SimpleNamespace(job="7")
    outside = SlurmBackend._outside(backend, task, [SlurmJob("7", state, "", "n1")])  # type: ignore[arg-type]
    assert outside is not None and (outside.cause, outside.what) == (cause, said)
    assert not outside.cancelled
