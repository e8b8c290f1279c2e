"""The batch script a job becomes (pure: no cluster needed)."""

from __future__ import annotations

import doctest
import math
import re
import shlex
import subprocess
from pathlib import Path

import psutil
import pytest
from helpers import wait_for

from trainfleet.backends.slurm import commands
from trainfleet.backends.slurm import script as script_module
from trainfleet.backends.slurm.backend import SlurmBackend
from trainfleet.backends.slurm.commands import _gpus
from trainfleet.backends.slurm.script import NotForSlurm, batch_script, components, shards_of
from trainfleet.scheduling.placement import Unschedulable
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
WARNED = Path("/data/run/start 1.warned")


def script(
    keys: list[tuple[str, int]],
    config: SlurmConfig,
    spec: JobSpec = SPEC,
    shards_per_gpu: int | None = None,
) -> str:
    return batch_script(
        "trainfleet-mnist-1",
        components(spec, keys, config, shards_per_gpu),
        config,
        Path("/o/%j.out"),
        STEP,
        warn_before=spec.grace_period,
        warned=WARNED,
    )


def test_docstrings() -> None:
    assert doctest.testmod(script_module).failed == 0


def test_one_component_and_one_step_per_shape() -> None:
    config = SlurmConfig(partition="gpu", account="ml", time_limit="1-00:00:00", spread=True)
    text = script(KEYS, config)
    directives = [
        line[len("#SBATCH ") :] for line in text.splitlines() if line.startswith("#SBATCH")
    ]
    assert directives[:5] == [
        "--job-name=trainfleet-mnist-1",
        "--output=/o/%j.out",
        "--open-mode=append",
        "--no-requeue",
        # To the batch shell alone (B:), time to save before the limit or a preemption.
        f"--signal=B:TERM@{math.ceil(SPEC.grace_period)}",
    ]
    # Partition, account and time on every component: Slurm carries the partition to none.
    every = "--partition=gpu --account=ml --time=1-00:00:00"
    assert directives[5:] == [
        f"--ntasks=3 --cpus-per-task=2 --mem-per-cpu=512M --gpus-per-task=1 --spread-job {every}",
        "hetjob",
        f"--ntasks=1 --cpus-per-task=1 --mem-per-cpu=3072M --spread-job {every}",
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
    # The batch shell tells the bootstraps, and waits on for the steps after the signal.
    assert "\ntrap 'touch '\"'\"'/data/run/start 1.warned'\"'\"'' TERM\n" in text, text
    assert text.rstrip().endswith("until wait; do :; done  # a trapped signal ends a wait early")


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
    assert "#SBATCH --signal=B:TERM@10\n" in text  # for a preemption: no time limit here
    assert "--time" not in text
    silent = batch_script("x", components(SPEC, KEYS, SlurmConfig()), SlurmConfig(), WARNED, STEP)
    assert "--signal" not in silent and "\ntrap " not in silent  # nothing to tell, no grace


def test_the_batch_shell_tells_the_steps_and_waits_for_them(tmp_path: Path) -> None:
    """The script itself under bash: a SIGTERM to the batch shell alone creates the file
    the bootstraps watch, and the shell still waits for its steps to end."""
    warned = tmp_path / "start 1.warned"
    step = ["bash", "-c", f"while [ ! -e {shlex.quote(str(warned))} ]; do sleep 0.01; done"]
    text = batch_script(
        "x",
        components(SPEC, KEYS[1:3], SlurmConfig()),
        SlurmConfig(),
        warned,
        step,
        warn_before=5,
        warned=warned,
    )
    # No Slurm here: each step runs as a plain process.
    text = re.sub(r"^srun( --\S+)* ", "", text, flags=re.MULTILINE)
    shell = subprocess.Popen(["bash", "-c", text])
    wait_for(
        lambda: any(p.cmdline()[:2] == step[:2] for p in psutil.Process(shell.pid).children()),
        what="the step to start",
    )
    shell.terminate()
    assert shell.wait(timeout=30) == 0 and warned.exists()


HALVES = JobSpec.model_validate(
    {
        "name": "half",
        "roles": {
            "worker": {"replicas": 2, "command": "x", "resources": {"gpu": 0.5}},
            "chief": {"command": "x", "resources": {"gpu": 1}},
        },
    }
)


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


def test_fractions_of_a_gpu_become_shards_one_component_per_task() -> None:
    """Slurm counts --gres per node: two halves in one component could share 2 shards on
    one node, so each task with a fraction is a component (and a step) of its own."""
    text = script([("worker", 0), ("worker", 1), ("chief", 0)], SlurmConfig(), HALVES, 4)
    shards = "--ntasks=1 --cpus-per-task=1 --mem-per-cpu=1024M --gres=shard:2"
    whole = "--ntasks=1 --cpus-per-task=1 --mem-per-cpu=1024M --gpus-per-task=1"
    assert _lines(text, "#SBATCH --ntasks") == [f"#SBATCH {shards}"] * 2 + [f"#SBATCH {whole}"]
    steps = _lines(text, "srun")
    assert len(steps) == 3 and all(f" {shards} " in step for step in steps[:2]), steps
    assert "--het-group=1 " in steps[1] and "--gres" not in steps[2], steps


@pytest.mark.parametrize(
    ("fraction", "per_gpu", "shards"),
    [(0.5, 4, 2), (0.25, 4, 1), (0.3, 4, 2), (0.3, 10, 3), (0.999, 4, 4), (0.001, 8, 1)],
)
def test_a_fraction_is_its_share_of_a_gpus_shards_rounded_up(
    fraction: float, per_gpu: int, shards: int
) -> None:
    assert shards_of(fraction, per_gpu) == shards


def test_fractions_are_refused_by_name_where_the_cluster_has_no_shards() -> None:
    with pytest.raises(NotForSlurm) as refused:
        script([("worker", 0)], SlurmConfig(partition="gpu"), HALVES, 0)
    assert str(refused.value).startswith(
        "roles.worker.resources.gpu: 0.5 is a fraction of a GPU, which Slurm gives as GPU "
        "shards, and partition gpu has no shards configured (gres/shard"
    )


def test_shards_not_asked_of_slurm_are_shown_as_such() -> None:
    """A dry run where Slurm does not answer: the request, its count to come."""
    text = script([("worker", 0)], SlurmConfig(), HALVES, None)
    shown = "--gres=shard:<0.5 x the shards per GPU, from Slurm>"
    assert f" {shown}\n" in text and f" '{shown}' " in text, text


@pytest.mark.parametrize(
    ("sinfo", "partition", "per_gpu", "total"),
    [
        ("n1|gpu:2,shard:8|trainfleet*\nn1|gpu:2,shard:8|small\n", None, 4, 8),
        # The fewest of the nodes with shards; a node without GPUs has none to give.
        ("n1|gpu:2,shard:8|p\nn2|gpu:a100:4,shard:8(S:0)|p\nn3|(null)|p\n", "p", 2, 16),
        ("n1|gpu:2|trainfleet*\n", None, 0, 0),
        ("n1|gpu:2,shard:8|other\n", None, 0, 0),  # not of the default partition
    ],
)
def test_gpu_shards_from_sinfo(
    monkeypatch: pytest.MonkeyPatch, sinfo: str, partition: str | None, per_gpu: int, total: int
) -> None:
    """Pure: sinfo's answer stands in for the cluster's."""
    asked = []
    monkeypatch.setattr(commands, "_run", lambda argv, timeout: asked.append(argv) or sinfo)
    assert commands.gpu_shards(partition) == (per_gpu, total)
    assert asked[0][:5] == ["sinfo", "-h", "-N", "-o", "%N|%G|%P"]
    assert asked[0][5:] == (["-p", partition] if partition else [])


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [("(null)", 0), ("gpu:2", 2), ("gpu:a100:4(S:0-1)", 4), ("gpu:1,gpu:v100:2,license:3", 3)],
)
def test_gpus_of_a_node(gres: str, gpus: int) -> None:
    assert _gpus(gres) == gpus
    assert _gpus(f"{gres},shard:{gpus * 4}", "shard") == gpus * 4


@pytest.mark.parametrize(
    ("state", "told", "cause", "said"),
    [
        ("PREEMPTED", None, "preempted", "Slurm preempted job 7"),
        ("TIMEOUT", None, "node-lost", "Slurm job 7 reached its time limit"),
        ("OUT_OF_MEMORY", None, "node-lost", "Slurm job 7 ended OUT_OF_MEMORY"),
        # The program saved and ended in its grace: Slurm says COMPLETED or FAILED, the
        # bootstrap what Slurm told it.
        ("COMPLETED", "preempted", "preempted", "Slurm preempted job 7"),
        ("FAILED", "preempted", "preempted", "Slurm preempted job 7"),
        ("COMPLETED", "time-limit", "node-lost", "Slurm job 7 was warned of its time limit"),
        ("FAILED", "time-limit", "node-lost", "Slurm job 7 was warned of its time limit"),
    ],
)
def test_what_slurm_did_to_a_job_is_an_infrastructure_failure(
    state: str, told: str | None, cause: str, said: str
) -> None:
    """Pure: the backend's reading of a job's state and of what its bootstrap was told,
    without a cluster (a stand-in for the backend and the task: only the fields it reads)."""
    from types import SimpleNamespace

    from trainfleet.backends.slurm.backend import SlurmBackend
    from trainfleet.backends.slurm.commands import SlurmJob

    backend = SimpleNamespace(_cancelled=set(), _failed_nodes=SlurmBackend._failed_nodes)
    task = SimpleNamespace(job="7")
    job = [SlurmJob("7", state, "", "n1")]
    outside = SlurmBackend._outside(backend, task, job, told)  # type: ignore[arg-type]
    assert outside is not None and (outside.cause, outside.what) == (cause, said)
    assert not outside.cancelled


def test_fractions_past_the_partitions_shards_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pure (sinfo's answers stand in for a cluster of one GPU node of 8 shards and two nodes
    without GPUs): three `gpu: 0.9` tasks are 4 shards each, 12 of the 8 there."""

    def sinfo(argv: list[str], timeout: float = 0) -> str:
        if argv[4] == "%N|%G|%P":  # the shards
            return "n1|gpu:2,shard:8|p\nn2|(null)|p\nn3|(null)|p\n"
        return "n1|4|4000|gpu:2,shard:8|p\nn2|4|4000|(null)|p\nn3|4|4000|(null)|p\n"

    monkeypatch.setattr(commands, "_run", sinfo)
    backend = SlurmBackend(SlurmConfig(partition="p"))
    thin = {"replicas": 3, "command": "true", "resources": {"gpu": 0.9}}
    with pytest.raises(Unschedulable, match=r"make 12 GPU shards .* partition p has 8"):
        backend.check(JobSpec.model_validate({"name": "thin", "roles": {"eval": thin}}))
    thin["replicas"] = 2
    backend.check(JobSpec.model_validate({"name": "thin", "roles": {"eval": thin}}))
