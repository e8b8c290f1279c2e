"""Kubeflow MXJob's DMLC_* variables and MX_CONFIG."""

from __future__ import annotations

import json

from .jobs import HOST, common, environments, job

MX_JOB = {"scheduler": 1, "server": 1, "worker": 2}
CLUSTER = (
    f'"cluster":{{"scheduler":[{{"url":"{HOST}","port":2000}}],'
    f'"server":[{{"url":"{HOST}","port":2001}}],'
    f'"worker":[{{"url":"{HOST}","port":2002}},{{"url":"{HOST}","port":2003}}]}},'
    '"labels":{"scheduler":"","server":"","worker":""}'
)


def mx_config(task_type: str, index: int) -> str:
    return f'{{{CLUSTER},"task":{{"type":"{task_type}","index":{index}}}}}'


def dmlc(role: str, index: int) -> dict[str, str]:
    env = {
        "MX_CONFIG": mx_config(role, index),
        "DMLC_PS_ROOT_PORT": "2000",
        "DMLC_PS_ROOT_URI": HOST,
        "DMLC_NUM_SERVER": "1",
        "DMLC_NUM_WORKER": "2",
        "DMLC_ROLE": role,
        "DMLC_USE_KUBERNETES": "0",
    }
    if role == "worker":
        env["DMLC_WORKER_ID"] = str(index)
    return env


def test_exact_environment_of_a_ps_lite_job() -> None:
    envs = environments(job("mxnet", MX_JOB))
    everyone = (
        f'{{"scheduler":["{HOST}:2000"],"server":["{HOST}:2001"],'
        f'"worker":["{HOST}:2002","{HOST}:2003"]}}'
    )
    assert envs == {
        ("scheduler", 0): dmlc("scheduler", 0) | common("scheduler", 0, 2000, everyone),
        ("server", 0): dmlc("server", 0) | common("server", 0, 2001, everyone),
        ("worker", 0): dmlc("worker", 0) | common("worker", 0, 2002, everyone),
        ("worker", 1): dmlc("worker", 1) | common("worker", 1, 2003, everyone),
    }


def test_role_ps_is_a_server() -> None:
    envs = environments(job("mxnet", {"scheduler": 1, "ps": 2, "worker": 1}))
    ps = envs[("ps", 1)]
    assert ps["DMLC_ROLE"] == "server"
    assert ps["DMLC_NUM_SERVER"] == "2"
    config = json.loads(ps["MX_CONFIG"])
    assert config["task"] == {"type": "server", "index": 1}
    assert sorted(config["cluster"]) == ["scheduler", "server", "worker"]


def test_other_roles_get_the_cluster_but_no_dmlc_role() -> None:
    envs = environments(job("mxnet", MX_JOB | {"tensorboard": 1}))
    env = envs[("tensorboard", 0)]
    assert "DMLC_ROLE" not in env
    assert env["DMLC_PS_ROOT_URI"] == HOST
    assert json.loads(env["MX_CONFIG"])["task"] == {"type": "tensorboard", "index": 0}


def test_no_scheduler_means_no_root() -> None:
    env = environments(job("mxnet", {"worker": 2}))[("worker", 0)]
    assert "DMLC_PS_ROOT_URI" not in env
    assert "DMLC_PS_ROOT_PORT" not in env
    assert env["DMLC_NUM_SERVER"] == "0"
