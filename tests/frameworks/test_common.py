"""The variables every task gets, the order in which env sources win, and the generic framework."""

from __future__ import annotations

import doctest
import importlib

import pytest

from trainfleet.frameworks import task_environment

from .jobs import HOST, JOB_ID, common, contexts, environments, job


def test_generic_job_gets_exactly_the_common_variables() -> None:
    spec = job(
        "generic",
        {"trainer": {"replicas": 2, "resources": {"gpu": 2}}, "helper": 1},
        input_path="/data/in",
        checkpoint_path="/data/ckpt",
    )
    envs = environments(spec, gpus=(0, 1, 2, 3, 4))
    cluster = f'{{"trainer":["{HOST}:2000","{HOST}:2001"],"helper":["{HOST}:2002"]}}'
    paths = {"TRAINFLEET_INPUT_PATH": "/data/in", "TRAINFLEET_CHECKPOINT_PATH": "/data/ckpt"}
    assert envs == {
        ("trainer", 0): common("trainer", 0, 2000, cluster, gpus="0,1") | paths,
        ("trainer", 1): common("trainer", 1, 2001, cluster, gpus="2,3") | paths,
        ("helper", 0): common("helper", 0, 2002, cluster, gpus="") | paths,
    }


def test_common_variables_in_full() -> None:
    spec = job("generic", {"worker": {"replicas": 1, "resources": {"gpu": 1}}})
    env = environments(spec, gpus=(5, 7))[("worker", 0)]
    assert env == {
        "TRAINFLEET_JOB": JOB_ID,
        "TRAINFLEET_ROLE": "worker",
        "TRAINFLEET_INDEX": "0",
        "TRAINFLEET_CLUSTER": f'{{"worker":["{HOST}:2000"]}}',
        "TRAINFLEET_ADDRESS": f"{HOST}:2000",
        "TRAINFLEET_PORT": "2000",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "5",
        "TRAINFLEET_GPUS": "5",
    }


def test_paths_are_absent_when_unset() -> None:
    env = environments(job("generic", {"worker": 1}))[("worker", 0)]
    assert "TRAINFLEET_INPUT_PATH" not in env
    assert "TRAINFLEET_CHECKPOINT_PATH" not in env


def test_task_without_gpus_sees_none() -> None:
    """An empty CUDA_VISIBLE_DEVICES hides every GPU; a missing one would show them all."""
    spec = job("pytorch", {"worker": {"replicas": 1, "resources": {"gpu": 1}}, "tensorboard": 1})
    envs = environments(spec, gpus=(0, 1))
    assert envs[("worker", 0)]["CUDA_VISIBLE_DEVICES"] == "0"
    assert envs[("tensorboard", 0)]["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(
    "framework", ["tensorflow", "pytorch", "jax", "xgboost", "mxnet", "generic"]
)
def test_user_values_win_role_env_over_job_env(framework: str) -> None:
    spec = job(
        framework,
        {"worker": {"replicas": 2, "env": {"RANK": "role", "SHARED": "role"}}},
        env={"RANK": "job", "SHARED": "job", "JOB_ONLY": 3, "CUDA_VISIBLE_DEVICES": "0"},
    )
    env = environments(spec)[("worker", 1)]
    assert env["RANK"] == "role"
    assert env["SHARED"] == "role"
    assert env["JOB_ONLY"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"


def test_framework_variables_come_first_then_common_then_user() -> None:
    spec = job("pytorch", {"worker": {"replicas": 1, "env": {"MINE": "1"}}}, env={"OURS": "1"})
    keys = list(task_environment(contexts(spec)[("worker", 0)]))
    assert keys.index("MASTER_ADDR") < keys.index("TRAINFLEET_JOB") < keys.index("OURS")
    assert keys[-1] == "MINE"


def test_environment_is_pure() -> None:
    spec = job("tensorflow", {"worker": 2, "ps": 1})
    ctx = contexts(spec)[("worker", 1)]
    first = task_environment(ctx)
    first["TF_CONFIG"] = "changed"
    assert task_environment(ctx) != first
    assert task_environment(ctx) == task_environment(ctx)


@pytest.mark.parametrize(
    "module",
    ["__init__", "common", "tensorflow", "pytorch", "jax", "mxnet", "xgboost", "argv"],
)
def test_docstring_examples(module: str) -> None:
    name = "trainfleet.frameworks" + ("" if module == "__init__" else f".{module}")
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0


def test_a_gpu_fraction_shares_a_device_and_is_passed_to_the_task() -> None:
    spec = job(
        "tensorflow",
        {"worker": {"replicas": 2, "resources": {"gpu": 0.5}}, "chief": {"resources": {"gpu": 1}}},
    )
    envs = environments(spec, gpus=(4, 6))
    workers = [envs[("worker", index)] for index in (0, 1)]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in workers] == ["6", "6"]
    assert envs[("chief", 0)]["CUDA_VISIBLE_DEVICES"] == "4"
    assert all(env["TRAINFLEET_GPU_FRACTION"] == "0.5" for env in workers)
    assert all(env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" for env in workers)
    assert all(env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5" for env in workers)
    assert all(env["CUPY_GPU_MEMORY_LIMIT"] == "50%" for env in workers)
    assert "TRAINFLEET_GPU_FRACTION" not in envs[("chief", 0)]
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in envs[("chief", 0)]
    torch_env = environments(job("pytorch", {"worker": {"resources": {"gpu": 0.25}}}), gpus=(0,))
    assert torch_env[("worker", 0)]["TRAINFLEET_GPU_FRACTION"] == "0.25"
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in torch_env[("worker", 0)]
