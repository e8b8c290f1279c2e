"""Per-framework task environments: pure functions from a job's placement to env and argv.

One module per framework builds its cluster-spec variables in the de-facto standard format
(``tensorflow``: ``TF_CONFIG``; ``pytorch``: ``MASTER_*``/``RANK``/torchrun ``PET_*``; ``jax``;
``mxnet``: ``DMLC_*``; ``xgboost``); ``common`` adds what every task gets.

>>> from trainfleet.frameworks.base import TaskContext
>>> from trainfleet.scheduling.placement import build_placement
>>> from trainfleet.spec.models import JobSpec
>>> job = JobSpec.model_validate({"name": "ddp", "framework": "pytorch",
...     "roles": {"worker": {"replicas": 2, "command": "python train.py"}}})
>>> placement = build_placement(job, "10.0.0.5", {("worker", 0): 2222, ("worker", 1): 2223}, {})
>>> env = task_environment(TaskContext("ddp-1", job, placement, "worker", 1))
>>> env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["RANK"]
('10.0.0.5', '2222', '2', '1')
>>> task_argv(TaskContext("ddp-1", job, placement, "worker", 1))
['python', 'train.py']
"""

from trainfleet.frameworks.argv import task_argv
from trainfleet.frameworks.environment import task_environment

__all__ = ["task_argv", "task_environment"]
