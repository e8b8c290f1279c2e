"""JAX's coordinator variables and Kubeflow JAXJob's."""

from __future__ import annotations

from .jobs import HOST, common, environments, job


def jax_env(process_id: int, processes: int = 3) -> dict[str, str]:
    return {
        "JAX_COORDINATOR_ADDRESS": f"{HOST}:2000",
        "JAX_NUM_PROCESSES": str(processes),
        "JAX_PROCESS_ID": str(process_id),
        "COORDINATOR_ADDRESS": HOST,
        "COORDINATOR_PORT": "2000",
        "NUM_PROCESSES": str(processes),
        "PROCESS_ID": str(process_id),
    }


def test_exact_environment_of_a_worker_job() -> None:
    envs = environments(job("jax", {"worker": 3}))
    cluster = f'{{"worker":["{HOST}:2000","{HOST}:2001","{HOST}:2002"]}}'
    assert envs == {
        ("worker", i): jax_env(i) | common("worker", i, 2000 + i, cluster) for i in range(3)
    }


def test_master_is_process_zero_and_other_roles_stay_out() -> None:
    envs = environments(job("jax", {"worker": 2, "chief": 1, "tensorboard": 1}))
    cluster = (
        f'{{"worker":["{HOST}:2000","{HOST}:2001"],"chief":["{HOST}:2002"],'
        f'"tensorboard":["{HOST}:2003"]}}'
    )
    coordinator = {"JAX_COORDINATOR_ADDRESS": f"{HOST}:2002", "COORDINATOR_PORT": "2002"}
    assert envs == {
        ("chief", 0): jax_env(0) | coordinator | common("chief", 0, 2002, cluster),
        ("worker", 0): jax_env(1) | coordinator | common("worker", 0, 2000, cluster),
        ("worker", 1): jax_env(2) | coordinator | common("worker", 1, 2001, cluster),
        ("tensorboard", 0): common("tensorboard", 0, 2003, cluster),
    }
