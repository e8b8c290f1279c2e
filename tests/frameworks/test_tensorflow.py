"""TF_CONFIG as Kubeflow writes it, read back by TensorFlow's own cluster resolver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from .jobs import HOST, common, environments, free_ports, job

TF_JOB: dict[str, int | dict[str, Any]] = {
    "chief": 1,
    "worker": 2,
    "ps": {"replicas": 1, "command": "trainfleet tf-server"},
}
CLUSTER = (
    f'"cluster":{{"chief":["{HOST}:2000"],"ps":["{HOST}:2003"],'
    f'"worker":["{HOST}:2001","{HOST}:2002"]}}'
)


def tf_config(task_type: str, index: int) -> str:
    return f'{{{CLUSTER},"task":{{"type":"{task_type}","index":{index}}},"environment":"cloud"}}'


def test_exact_environment_of_a_parameter_server_job() -> None:
    envs = environments(job("tensorflow", TF_JOB | {"evaluator": 1}))
    everyone = (
        f'{{"chief":["{HOST}:2000"],"worker":["{HOST}:2001","{HOST}:2002"],'
        f'"ps":["{HOST}:2003"],"evaluator":["{HOST}:2004"]}}'
    )
    assert envs == {
        ("chief", 0): {"TF_CONFIG": tf_config("chief", 0)} | common("chief", 0, 2000, everyone),
        ("worker", 0): {"TF_CONFIG": tf_config("worker", 0)} | common("worker", 0, 2001, everyone),
        ("worker", 1): {"TF_CONFIG": tf_config("worker", 1)} | common("worker", 1, 2002, everyone),
        ("ps", 0): {"TF_CONFIG": tf_config("ps", 0)} | common("ps", 0, 2003, everyone),
        ("evaluator", 0): {"TF_CONFIG": tf_config("evaluator", 0)}
        | common("evaluator", 0, 2004, everyone),
    }


def test_tf_config_literal() -> None:
    """Compact, keys in Kubeflow's order, roles sorted as Go sorts map keys."""
    env = environments(job("tensorflow", {"worker": 2, "ps": 1}))[("worker", 1)]
    assert env["TF_CONFIG"] == (
        '{"cluster":{"ps":["10.0.0.1:2002"],"worker":["10.0.0.1:2000","10.0.0.1:2001"]},'
        '"task":{"type":"worker","index":1},"environment":"cloud"}'
    )


@pytest.mark.parametrize("outsider", ["evaluator", "client", "tensorboard"])
def test_roles_without_a_tf_server_are_outside_the_cluster_but_get_tf_config(
    outsider: str,
) -> None:
    envs = environments(job("tensorflow", {"worker": 2, outsider: 1}))
    for env in envs.values():
        assert list(json.loads(env["TF_CONFIG"])["cluster"]) == ["worker"]
    config = json.loads(envs[(outsider, 0)]["TF_CONFIG"])
    assert config["task"] == {"type": outsider, "index": 0}


def test_single_task_job_gets_no_tf_config() -> None:
    """Kubeflow's rule: one lone process is local training, not a cluster."""
    env = environments(job("tensorflow", {"worker": 1}))[("worker", 0)]
    assert "TF_CONFIG" not in env


def test_a_client_of_one_tf_server_gets_tf_config() -> None:
    spec = job("tensorflow", {"worker": {"command": "trainfleet tf-server"}, "client": 1})
    config = json.loads(environments(spec)[("client", 0)]["TF_CONFIG"])
    assert config["cluster"] == {"worker": [f"{HOST}:2000"]}


RESOLVE = textwrap.dedent(
    """
    import json, os, sys
    import tensorflow as tf

    out = {}
    for key, config in json.load(sys.stdin).items():
        if config is not None:  # None: the TF_CONFIG this process was started with
            os.environ["TF_CONFIG"] = config
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        cluster = resolver.cluster_spec().as_dict()
        master = resolver.master() if resolver.task_type in cluster else None
        out[key] = [cluster, resolver.task_type, resolver.task_id, master]
    print(json.dumps(out))
    """
)


def run_python(script: str, env: dict[str, str], stdin: str = "") -> str:
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=stdin,
        env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "2"} | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_tensorflow_resolves_our_tf_config() -> None:
    """TF's TFConfigClusterResolver, in a subprocess: the chief's TF_CONFIG comes through the
    process environment, the other tasks' are set in turn."""
    envs = environments(job("tensorflow", TF_JOB | {"evaluator": 1}))
    configs: dict[str, str | None] = {
        f"{role}/{index}": env["TF_CONFIG"] for (role, index), env in envs.items()
    }
    first = envs[("chief", 0)]["TF_CONFIG"]
    configs["chief/0"] = None
    out = run_python(RESOLVE, {"TF_CONFIG": first}, stdin=json.dumps(configs))
    cluster = {
        "chief": [f"{HOST}:2000"],
        "ps": [f"{HOST}:2003"],
        "worker": [f"{HOST}:2001", f"{HOST}:2002"],
    }
    assert json.loads(out.splitlines()[-1]) == {
        "chief/0": [cluster, "chief", 0, f"{HOST}:2000"],
        "worker/0": [cluster, "worker", 0, f"{HOST}:2001"],
        "worker/1": [cluster, "worker", 1, f"{HOST}:2002"],
        "ps/0": [cluster, "ps", 0, f"{HOST}:2003"],
        "evaluator/0": [cluster, "evaluator", 0, None],
    }


COLLECTIVE = textwrap.dedent(
    """
    import json, os
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    value = strategy.run(lambda: tf.constant(float(resolver.task_id + 1)))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
    print(json.dumps([resolver.task_type, resolver.task_id,
                      strategy.num_replicas_in_sync, float(total)]))
    """
)


@pytest.mark.slow
def test_multi_worker_mirrored_strategy_runs_on_our_tf_config() -> None:
    """Two real TF workers form a collective cluster from nothing but our TF_CONFIG."""
    ports = dict(zip([("worker", 0), ("worker", 1)], free_ports(2), strict=True))
    envs = environments(job("tensorflow", {"worker": 2}), host="localhost", ports=ports)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", COLLECTIVE],
            env=os.environ | {"TF_CPP_MIN_LOG_LEVEL": "2"} | env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env in envs.values()
    ]
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=180)
        finally:
            proc.kill()
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.splitlines()[-1]))
    assert results == [["worker", 0, 2, 3.0], ["worker", 1, 2, 3.0]]
