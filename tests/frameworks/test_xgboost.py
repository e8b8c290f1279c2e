"""Kubeflow XGBoostJob's variables (Rabit tracker on the master, LightGBM's worker list)."""

from __future__ import annotations

from .jobs import HOST, common, environments, job


def test_exact_environment_with_a_master() -> None:
    envs = environments(job("xgboost", {"master": 1, "worker": 2}))
    cluster = f'{{"master":["{HOST}:2000"],"worker":["{HOST}:2001","{HOST}:2002"]}}'
    shared = {
        "MASTER_PORT": "2000",
        "MASTER_ADDR": HOST,
        "WORLD_SIZE": "3",
        "WORKER_PORT": "2001",
        "WORKER_ADDRS": f"{HOST},{HOST}",
    }
    assert envs == {
        ("master", 0): shared | {"RANK": "0"} | common("master", 0, 2000, cluster),
        ("worker", 0): shared | {"RANK": "1"} | common("worker", 0, 2001, cluster),
        ("worker", 1): shared | {"RANK": "2"} | common("worker", 1, 2002, cluster),
    }


def test_key_order_follows_kubeflow() -> None:
    env = environments(job("xgboost", {"master": 1, "worker": 1}))[("worker", 0)]
    assert list(env)[:6] == [
        "MASTER_PORT",
        "MASTER_ADDR",
        "WORLD_SIZE",
        "RANK",
        "WORKER_PORT",
        "WORKER_ADDRS",
    ]


def test_a_lone_master_gets_no_worker_list() -> None:
    env = environments(job("xgboost", {"master": 1}))[("master", 0)]
    assert env == {
        "MASTER_PORT": "2000",
        "MASTER_ADDR": HOST,
        "WORLD_SIZE": "1",
        "RANK": "0",
    } | common("master", 0, 2000, f'{{"master":["{HOST}:2000"]}}')


def test_without_a_master_worker_zero_runs_the_tracker() -> None:
    envs = environments(job("xgboost", {"worker": 3}))
    assert [envs[("worker", i)]["RANK"] for i in range(3)] == ["0", "1", "2"]
    assert envs[("worker", 2)]["MASTER_PORT"] == "2000"
    assert envs[("worker", 2)]["WORKER_PORT"] == "2001"
    assert envs[("worker", 2)]["WORKER_ADDRS"] == f"{HOST},{HOST}"
