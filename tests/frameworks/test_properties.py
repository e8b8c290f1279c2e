"""Properties over random role layouts: every rank once, one cluster view, consistent slots."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from trainfleet.frameworks import task_environment
from trainfleet.frameworks.base import TaskContext
from trainfleet.scheduling.placement import TaskKey, assign_gpus, build_placement, task_keys
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.models import JobSpec

OPTIONAL_ROLES = {
    "worker": 6,
    "ps": 3,
    "evaluator": 1,
    "scheduler": 1,
    "server": 2,
    "client": 1,
    "tensorboard": 1,
}
UNTRACKED = {"ps", "tensorboard"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # Open MPI's MCA names have lower case


@st.composite
def jobs(draw: st.DrawFn, framework: Framework | None = None) -> dict[TaskKey, TaskContext]:
    """A random job of ``framework`` (any when None), placed: every task's context."""
    framework = framework or draw(st.sampled_from(list(Framework)))
    roles: dict[str, dict[str, Any]] = {}
    if framework is Framework.MPI:  # a launcher, and workers without GPUs
        roles = {"launcher": {"replicas": 1}, "worker": {"replicas": draw(st.integers(1, 4))}}
    master = draw(st.sampled_from([None, "master", "chief"]))
    if master is not None and not roles:
        roles[master] = {"replicas": 1}
    for name, most in OPTIONAL_ROLES.items():
        replicas = draw(st.integers(0, most))
        if replicas and framework is not Framework.MPI:
            roles[name] = {"replicas": replicas}
    if set(roles) <= UNTRACKED:
        roles["worker"] = {"replicas": draw(st.integers(1, 4))}
    for role in roles.values():
        role["command"] = "python train.py"
        gpus = draw(st.integers(0, 2))
        role["resources"] = {"gpu": 0 if framework is Framework.MPI else gpus}
    order = draw(st.permutations(sorted(roles)))
    spec = JobSpec.model_validate(
        {
            "name": "prop",
            "framework": framework,
            "roles": {name: roles[name] for name in order},
            "pytorch": {
                "nproc_per_node": draw(st.integers(1, 8) | st.sampled_from(["auto", "gpu", "cpu"]))
            },
        }
    )
    keys = task_keys(spec)
    ports = draw(
        st.lists(st.integers(1024, 65535), min_size=len(keys), max_size=len(keys), unique=True)
    )
    host = draw(st.sampled_from(["127.0.0.1", "node-a", "10.1.2.3"]))
    inventory = list(range(sum(int(spec.roles[r].resources.gpu) for r, _ in keys)))
    placement = build_placement(
        spec, host, dict(zip(keys, ports, strict=True)), assign_gpus(spec, inventory)
    )
    return {key: TaskContext("job-1", spec, placement, *key) for key in keys}


def group_keys(contexts: dict[TaskKey, TaskContext], variable: str) -> list[TaskKey]:
    """The tasks of the process group, by Kubeflow's rule, in expected rank order.

    Checks on the way that exactly these tasks have ``variable``.
    """
    group = [key for key in contexts if key[0] in ("master", "chief")] + sorted(
        (key for key in contexts if key[0] == "worker"), key=lambda key: key[1]
    )
    having = [key for key, ctx in contexts.items() if variable in task_environment(ctx)]
    assert sorted(having) == sorted(group)
    return group


@given(jobs())
def test_every_value_is_a_string_under_an_env_name(contexts: dict[TaskKey, TaskContext]) -> None:
    for ctx in contexts.values():
        env = task_environment(ctx)
        assert all(isinstance(value, str) for value in env.values())
        assert all(ENV_NAME.match(name) for name in env)


@given(jobs())
def test_environment_is_a_pure_function(contexts: dict[TaskKey, TaskContext]) -> None:
    for ctx in contexts.values():
        assert task_environment(ctx) == task_environment(ctx)


@given(jobs())
def test_common_variables_describe_the_slot(contexts: dict[TaskKey, TaskContext]) -> None:
    seen_gpus: list[str] = []
    for (role, index), ctx in contexts.items():
        env = task_environment(ctx)
        slot = ctx.slot
        assert (env["TRAINFLEET_ROLE"], env["TRAINFLEET_INDEX"]) == (role, str(index))
        assert env["TRAINFLEET_ADDRESS"] == slot.address == f"{slot.host}:{env['TRAINFLEET_PORT']}"
        assert json.loads(env["TRAINFLEET_CLUSTER"])[role][index] == slot.address
        assert env["CUDA_VISIBLE_DEVICES"] == env["TRAINFLEET_GPUS"]
        gpus = [gpu for gpu in env["CUDA_VISIBLE_DEVICES"].split(",") if gpu]
        assert len(gpus) == int(ctx.spec.roles[role].resources.gpu)
        seen_gpus += gpus
    assert len(seen_gpus) == len(set(seen_gpus)), "a GPU was given to two tasks"


@given(jobs(Framework.PYTORCH))
def test_torch_ranks_cover_the_group_once(contexts: dict[TaskKey, TaskContext]) -> None:
    group = group_keys(contexts, "RANK")
    if not group:
        return
    envs = {key: task_environment(ctx) for key, ctx in contexts.items()}
    assert [envs[key]["RANK"] for key in group] == [str(rank) for rank in range(len(group))]
    assert [envs[key]["PET_NODE_RANK"] for key in group] == [envs[key]["RANK"] for key in group]
    master = contexts[group[0]].slot
    nproc = contexts[group[0]].spec.pytorch.nproc_per_node  # type: ignore[union-attr]
    world = len(group) * (nproc if isinstance(nproc, int) else 1)
    for key in group:
        env = envs[key]
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (master.host, str(master.port))
        assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == (master.host, str(master.port))
        assert env["WORLD_SIZE"] == str(world)
        assert env["PET_NNODES"] == str(len(group))


@given(jobs(Framework.XGBOOST))
def test_xgboost_ranks_cover_the_group_once(contexts: dict[TaskKey, TaskContext]) -> None:
    group = group_keys(contexts, "RANK")
    if not group:
        return
    envs = {key: task_environment(ctx) for key, ctx in contexts.items()}
    assert [envs[key]["RANK"] for key in group] == [str(rank) for rank in range(len(group))]
    master = contexts[group[0]].slot
    others = [contexts[key].slot.host for key in group[1:]]
    for key in group:
        env = envs[key]
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (master.host, str(master.port))
        assert env["WORLD_SIZE"] == str(len(group))
        assert env.get("WORKER_ADDRS", "").split(",") == (others or [""])


@given(jobs(Framework.JAX))
def test_jax_process_ids_cover_the_group_once(contexts: dict[TaskKey, TaskContext]) -> None:
    group = group_keys(contexts, "JAX_PROCESS_ID")
    if not group:
        return
    envs = {key: task_environment(ctx) for key, ctx in contexts.items()}
    ids = [envs[key]["JAX_PROCESS_ID"] for key in group]
    assert ids == [envs[key]["PROCESS_ID"] for key in group]
    assert sorted(ids, key=int) == [str(i) for i in range(len(group))]
    coordinator = contexts[group[0]].slot
    for key in group:
        assert envs[key]["JAX_COORDINATOR_ADDRESS"] == coordinator.address
        assert envs[key]["COORDINATOR_ADDRESS"] == coordinator.host
        assert envs[key]["JAX_NUM_PROCESSES"] == str(len(group))


@given(jobs(Framework.TENSORFLOW))
def test_tf_config_is_one_cluster_seen_from_each_task(
    contexts: dict[TaskKey, TaskContext],
) -> None:
    placement = next(iter(contexts.values())).placement
    expected = {
        role: addresses
        for role, addresses in placement.addresses().items()
        if role not in ("evaluator", "client", "tensorboard")
    }
    for (role, index), ctx in contexts.items():
        env = task_environment(ctx)
        if len(contexts) == 1:
            assert "TF_CONFIG" not in env
            continue
        config = json.loads(env["TF_CONFIG"])
        assert config == {
            "cluster": expected,
            "task": {"type": role, "index": index},
            "environment": "cloud",
        }
        assert list(config["cluster"]) == sorted(expected)
        if role in expected:
            assert config["cluster"][role][index] == ctx.slot.address


@given(jobs(Framework.MXNET))
def test_mxnet_counts_and_root(contexts: dict[TaskKey, TaskContext]) -> None:
    roles = [role for role, _ in contexts]
    for (role, _), ctx in contexts.items():
        env = task_environment(ctx)
        assert env["DMLC_NUM_WORKER"] == str(roles.count("worker"))
        assert env["DMLC_NUM_SERVER"] == str(roles.count("server") + roles.count("ps"))
        if "scheduler" in roles:
            scheduler = contexts[("scheduler", 0)].slot
            assert env["DMLC_PS_ROOT_URI"] == scheduler.host
            assert env["DMLC_PS_ROOT_PORT"] == str(scheduler.port)
        expected = {"ps": "server"}.get(role, role)
        assert env.get("DMLC_ROLE") == (
            expected if expected in ("scheduler", "server", "worker") else None
        )
