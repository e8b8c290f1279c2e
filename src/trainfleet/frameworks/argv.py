"""A task's command line, with Submarine's ``%input_path%`` and ``%checkpoint_path%`` filled in.

The placeholders are replaced as plain text, in an argv list or a shell string alike: quote
them in a shell command yourself when a path may hold spaces (``--data "%input_path%"``).
"""

from __future__ import annotations

import re
import sys

from trainfleet.frameworks.base import TaskContext
from trainfleet.programs import (
    NOTEBOOK,
    RENDEZVOUS,
    RUN_FUNCTION,
    RUN_NOTEBOOK,
    TENSORBOARD,
    TF_SERVER,
)
from trainfleet.spec.functions import PROGRAM_WORDS as FUNCTION_WORDS
from trainfleet.spec.notebook import PROGRAM_WORDS as NOTEBOOK_WORDS
from trainfleet.spec.notebook_runs import PROGRAM_WORDS as RUN_NOTEBOOK_WORDS
from trainfleet.spec.rendezvous import PROGRAM_WORDS as RENDEZVOUS_WORDS
from trainfleet.spec.rendezvous import ROLE as RENDEZVOUS_ROLE
from trainfleet.spec.rendezvous import agents_python
from trainfleet.spec.tensorboard import PROGRAM_WORDS

PLACEHOLDER = re.compile(r"%(input_path|checkpoint_path)%")


def task_argv(ctx: TaskContext) -> list[str]:
    """The role's argv with the job's paths in place of their placeholders.

    Raises ValueError, naming the placeholder and the role, when the command uses a path
    the job does not set.
    """
    argv = ctx.spec.roles[ctx.role].argv()
    paths = {"input_path": ctx.spec.input_path, "checkpoint_path": ctx.spec.checkpoint_path}
    for word in argv:
        for name in PLACEHOLDER.findall(word):
            if paths[name] is None:
                raise ValueError(
                    f"role {ctx.role!r} uses %{name}% in its command, but the job sets no "
                    f"{name}: add `{name}: ...` to the job or remove the placeholder"
                )

    def fill(match: re.Match[str]) -> str:
        return paths[match.group(1)] or ""

    words = standalone([PLACEHOLDER.sub(fill, word) for word in argv])
    if ctx.role == RENDEZVOUS_ROLE and ctx.spec.hosts_rendezvous() and words[:1] == ["python3"]:
        peer = ctx.spec.master_role() or "worker"
        return [agents_python(ctx.spec.roles[peer].argv()), *words[1:]]
    own_python = not ctx.spec.image_of(ctx.role) and ctx.spec.environment_of(ctx.role) is None
    if words[1:2] == [str(RUN_FUNCTION)] and own_python:  # the Python python_problem checked
        return [sys.executable, *words[1:]]
    return words


def standalone(argv: list[str]) -> list[str]:
    """``trainfleet tf-server ARGS`` as ``python3 <tf_server.py> ARGS``.

    The program then runs under the task's own ``python3`` (the one with TensorFlow, found
    on the task's ``PATH``), which need not have trainfleet installed: it is stdlib only.
    A shell command (``trainfleet tf-server && ...``) is left as written.

    >>> standalone(["trainfleet", "tf-server", "--protocol", "grpc"])[2:]
    ['--protocol', 'grpc']
    """
    if len(argv) >= 2 and argv[0].rsplit("/", 1)[-1] == "trainfleet" and argv[1] == "tf-server":
        return ["python3", str(TF_SERVER), *argv[2:]]
    if tuple(argv[:2]) == NOTEBOOK_WORDS:  # JupyterLab: the task's own python, like tf-server
        return ["python3", str(NOTEBOOK)]
    if tuple(argv[:2]) == RENDEZVOUS_WORDS:  # torch's store: the agents' python (task_argv)
        return ["python3", str(RENDEZVOUS)]
    if tuple(argv[:2]) == RUN_NOTEBOOK_WORDS:  # a notebook run headless: the task's python
        return ["python3", str(RUN_NOTEBOOK), *argv[2:]]
    if tuple(argv[:2]) == FUNCTION_WORDS:  # a function: the task's python (task_argv)
        return ["python3", str(RUN_FUNCTION), *argv[2:]]
    if tuple(argv[:2]) == PROGRAM_WORDS:  # a job's TensorBoard: trainfleet's own python
        return [sys.executable, str(TENSORBOARD), *argv[2:]]
    return argv
