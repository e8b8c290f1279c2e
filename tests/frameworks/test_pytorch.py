"""Kubeflow PyTorchJob's variables, checked by real torch rendezvous: env:// and torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainfleet.programs import RENDEZVOUS
from trainfleet.spec.rendezvous import AGENT_SETTINGS, HISTORY_VARIABLE

from .jobs import HOST, common, environments, free_ports, job

TORCH_JOB = {"master": 1, "worker": 2, "tensorboard": 1}
EVERYONE = (
    f'{{"master":["{HOST}:2000"],"worker":["{HOST}:2001","{HOST}:2002"],'
    f'"tensorboard":["{HOST}:2003"]}}'
)


def torch_env(rank: int, world: int = 3, nproc: str = "1", nodes: int = 3) -> dict[str, str]:
    return {
        "MASTER_ADDR": HOST,
        "MASTER_PORT": "2000",
        "WORLD_SIZE": str(world),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "PET_MASTER_ADDR": HOST,
        "PET_MASTER_PORT": "2000",
        "PET_NPROC_PER_NODE": nproc,
        "PET_NNODES": str(nodes),
        "PET_NODE_RANK": str(rank),
    }


def test_exact_environment_with_a_master() -> None:
    envs = environments(job("pytorch", TORCH_JOB))
    assert envs == {
        ("master", 0): torch_env(0) | common("master", 0, 2000, EVERYONE),
        ("worker", 0): torch_env(1) | common("worker", 0, 2001, EVERYONE),
        ("worker", 1): torch_env(2) | common("worker", 1, 2002, EVERYONE),
        ("tensorboard", 0): common("tensorboard", 0, 2003, EVERYONE),
    }


def test_chief_is_the_master_too() -> None:
    envs = environments(job("pytorch", {"worker": 1, "chief": 1}))
    assert envs[("chief", 0)]["RANK"] == "0"
    assert envs[("worker", 0)]["RANK"] == "1"
    assert envs[("worker", 0)]["MASTER_PORT"] == "2001"


def test_without_a_master_worker_zero_is_rank_zero() -> None:
    envs = environments(job("pytorch", {"worker": 3}))
    for index in range(3):
        env = envs[("worker", index)]
        assert env["RANK"] == env["PET_NODE_RANK"] == str(index)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (HOST, "2000")
        assert env["WORLD_SIZE"] == env["PET_NNODES"] == "3"


def test_nproc_per_node_multiplies_world_size() -> None:
    envs = environments(job("pytorch", {"worker": 2}, pytorch={"nproc_per_node": 4}))
    assert envs[("worker", 1)] == {
        "MASTER_ADDR": HOST,
        "MASTER_PORT": "2000",
        "WORLD_SIZE": "8",
        "RANK": "1",
        "LOCAL_RANK": "0",
        "PET_MASTER_ADDR": HOST,
        "PET_MASTER_PORT": "2000",
        "PET_NPROC_PER_NODE": "4",
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
    } | common("worker", 1, 2001, f'{{"worker":["{HOST}:2000","{HOST}:2001"]}}')


@pytest.mark.parametrize("nproc", ["auto", "gpu", "cpu"])
def test_symbolic_nproc_per_node_goes_to_torchrun(nproc: str) -> None:
    env = environments(job("pytorch", {"worker": 2}, pytorch={"nproc_per_node": nproc}))
    assert env[("worker", 0)]["PET_NPROC_PER_NODE"] == nproc
    assert env[("worker", 0)]["WORLD_SIZE"] == "2"


def test_elastic_job_meets_in_the_store_trainfleet_hosts() -> None:
    """Every agent meets in role ``rendezvous``'s store, none hosting it (so losing rank 0's
    node leaves it); each round's workers make their own store."""
    spec = job(
        "pytorch",
        {"worker": 3},
        pytorch={"elastic": {"min_replicas": 2, "max_replicas": 4, "max_restarts": 3}},
    )
    assert list(spec.roles) == ["worker", "rendezvous"]
    assert spec.hosts_rendezvous() and not spec.is_tracked("rendezvous")
    envs = environments(spec)
    cluster = (
        f'{{"worker":["{HOST}:2000","{HOST}:2001","{HOST}:2002"],"rendezvous":["{HOST}:2003"]}}'
    )
    elastic = {
        "MASTER_ADDR": HOST,
        "MASTER_PORT": "2000",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "0",
        "PET_MASTER_ADDR": HOST,
        "PET_MASTER_PORT": "2000",
        "PET_NPROC_PER_NODE": "1",
        "PET_NNODES": "2:4",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"{HOST}:2003",
        "PET_RDZV_ID": "job-7",
        "PET_MAX_RESTARTS": "3",
        "PET_RDZV_CONF": AGENT_SETTINGS,
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    assert "is_host=false" in AGENT_SETTINGS
    assert envs == {
        ("worker", 0): elastic | {"RANK": "0"} | common("worker", 0, 2000, cluster),
        ("worker", 1): elastic | {"RANK": "1"} | common("worker", 1, 2001, cluster),
        ("worker", 2): elastic | {"RANK": "2"} | common("worker", 2, 2002, cluster),
        ("rendezvous", 0): common("rendezvous", 0, 2003, cluster),
    }


def test_a_role_named_like_the_store_is_refused_in_an_elastic_job() -> None:
    with pytest.raises(ValueError, match="rendezvous store's; rename that role"):
        job(
            "pytorch",
            {"worker": 2, "rendezvous": 1},
            pytorch={"elastic": {"min_replicas": 1, "max_replicas": 2}},
        )


def test_elastic_job_with_another_backend_gets_no_c10d_conf() -> None:
    spec = job(
        "pytorch",
        {"worker": 2},
        pytorch={"elastic": {"min_replicas": 1, "max_replicas": 2, "rdzv_backend": "etcd-v2"}},
    )
    env = environments(spec)[("worker", 0)]
    assert env["PET_RDZV_BACKEND"] == "etcd-v2"
    assert "PET_RDZV_CONF" not in env
    assert "PET_NODE_RANK" not in env


def test_roles_outside_the_group_get_only_common_variables() -> None:
    envs = environments(job("pytorch", {"worker": 2, "ps": 1, "evaluator": 1}))
    for role in ("ps", "evaluator"):
        assert not any(key.startswith(("PET_", "MASTER_")) for key in envs[(role, 0)])
        assert "RANK" not in envs[(role, 0)]


# -- real torch ---------------------------------------------------------------------------

ENV_INIT = textwrap.dedent(
    """
    import json, os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    value = torch.tensor([dist.get_rank() + 1])
    dist.all_reduce(value)
    print(json.dumps([dist.get_rank(), dist.get_world_size(), int(value)]))
    dist.destroy_process_group()
    """
)


def run_all(argvs: list[list[str]], envs: list[dict[str, str]], cwd: Path) -> list[str]:
    """Starts every process at once, waits for them all; returns their stdouts."""
    procs = [
        subprocess.Popen(
            argv,
            env=os.environ | env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv, env in zip(argvs, envs, strict=True)
    ]
    outs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-3000:]
            outs.append(out)
    finally:
        for proc in procs:
            proc.kill()
    return outs


def local_envs(roles: dict[str, int], **fields: object) -> list[dict[str, str]]:
    """The tasks' variables, roles in order (the ones the job adds last)."""
    spec = job("pytorch", roles, **fields)
    keys = [(role, index) for role, spec_ in spec.roles.items() for index in range(spec_.replicas)]
    ports = dict(zip(keys, free_ports(len(keys)), strict=True))
    return list(environments(spec, host="127.0.0.1", ports=ports).values())


@pytest.mark.slow
def test_gloo_env_rendezvous(tmp_path: Path) -> None:
    """A plain `init_process_group(init_method="env://")` forms the group from our variables."""
    envs = local_envs({"master": 1, "worker": 1})
    outs = run_all([[sys.executable, "-c", ENV_INIT]] * 2, envs, tmp_path)
    assert [json.loads(out) for out in outs] == [[0, 2, 3], [1, 2, 3]]


TRAIN = textwrap.dedent(
    """
    import json, os
    from pathlib import Path
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([1])
    dist.all_reduce(value)
    result = [int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]),
              dist.get_world_size(), int(value)]
    Path(f"rank-{os.environ['RANK']}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    """
)


def torchrun_results(folder: Path) -> list[list[int]]:
    """What every process of the torchrun job wrote (one file each: their stdout is shared)."""
    return sorted(json.loads(path.read_text()) for path in folder.glob("rank-*.json"))


@pytest.mark.slow
def test_torchrun_needs_no_flags(tmp_path: Path) -> None:
    """`torchrun train.py` on two nodes of two processes each: ranks 0-3, world 4."""
    (tmp_path / "train.py").write_text(TRAIN)
    envs = local_envs({"worker": 2}, pytorch={"nproc_per_node": 2})
    torchrun = [sys.executable, "-m", "torch.distributed.run", "train.py"]
    run_all([torchrun] * 2, envs, tmp_path)
    assert torchrun_results(tmp_path) == [[0, 0, 4, 4], [1, 1, 4, 4], [2, 0, 4, 4], [3, 1, 4, 4]]


@pytest.mark.slow
def test_torchrun_elastic_c10d_on_one_host(tmp_path: Path) -> None:
    """Three elastic agents on one machine meet at the store the job's ``rendezvous`` task
    serves (trainfleet's program, run here by hand), which writes the round it saw."""
    (tmp_path / "train.py").write_text(TRAIN)
    *agents, store_env = local_envs(
        {"master": 1, "worker": 2},
        pytorch={"elastic": {"min_replicas": 3, "max_replicas": 3}},
    )
    history = tmp_path / "rounds.jsonl"
    store = subprocess.Popen(
        [sys.executable, str(RENDEZVOUS)],
        env=os.environ | store_env | {HISTORY_VARIABLE: str(history)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        torchrun = [sys.executable, "-m", "torch.distributed.run", "train.py"]
        run_all([torchrun] * 3, agents, tmp_path)
    finally:
        store.terminate()
        said, _ = store.communicate(timeout=30)
    assert torchrun_results(tmp_path) == [[0, 0, 3, 3], [1, 0, 3, 3], [2, 0, 3, 3]]
    assert store.returncode == 0 and "round 0: world size 3" in said, said
    assert [json.loads(line)["world"] for line in history.read_text().splitlines()] == [3]
