"""The rendezvous store of an elastic PyTorch job (``pytorch.elastic``, c10d backend).

trainfleet hosts the c10d store the job's torchrun agents meet in, as one more role,
``rendezvous``, that lives as long as the job: no agent holds the group's store, so losing
any node (rank 0's too) leaves the group able to re-form. The role runs the job's own python
(``programs/rendezvous_store.py``, which needs torch) in the job's image or environment, never
decides the job's end, and stops once its training tasks have ended.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = "rendezvous"
"""The role an elastic c10d job gets."""

PROGRAM_WORDS = ("trainfleet", "rendezvous-store")
"""Its command, made standalone at launch (``frameworks.argv``): the task's own python."""

STORE_ROLE: dict[str, Any] = {
    "command": list(PROGRAM_WORDS),
    "tracked": False,
    "restart_policy": "on-failure",
}
"""The role, as a job file would write it (a stored job reads it back as the same role)."""

AGENT_SETTINGS = "is_host=false,last_call_timeout=3,keep_alive_interval=2,keep_alive_max_attempt=3"
"""``PET_RDZV_CONF`` of every agent: none hosts the store; a round closes 3 s after its
minimum has joined; a member silent for 6 s (3 missed beats of 2 s) is dropped, so survivors
re-form within seconds of a loss rather than torch's 15 s + 30 s."""

HISTORY_VARIABLE = "TRAINFLEET_RENDEZVOUS_LOG"
"""Where the store writes each round it sees complete (one JSON object a line)."""


def wants_store(data: dict[str, Any]) -> bool:
    """Whether a job file (as read, before validation) describes an elastic PyTorch job
    whose agents meet through c10d."""
    elastic = _field(data.get("pytorch"), "elastic")
    if data.get("framework") != "pytorch" or elastic is None:
        return False
    return _field(elastic, "rdzv_backend") in (None, "c10d")


def _field(value: Any, name: str) -> Any:
    """A field of a mapping as read, or of a model already made."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


_PYTHON = re.compile(r"python[0-9.]*")


def agents_python(argv: list[str]) -> str:
    """The python the group's agents run, for the store to run under the same (with torch):
    the command's own (``/opt/conda/bin/python -m torch.distributed.run``), the one beside
    its torchrun (``/venv/bin/torchrun``: ``/venv/bin/python3``), else ``python3``.

    >>> agents_python(["/venv/bin/torchrun", "train.py"]), agents_python(["torchrun", "t.py"])
    ('/venv/bin/python3', 'python3')
    >>> agents_python(["/opt/py/bin/python3.11", "-m", "torch.distributed.run", "t.py"])
    '/opt/py/bin/python3.11'
    """
    first = argv[0] if argv else ""
    folder, _, name = first.rpartition("/")
    if _PYTHON.fullmatch(name):
        return first
    if name == "torchrun" and folder:
        return f"{folder}/python3"
    return "python3"
