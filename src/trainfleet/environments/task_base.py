"""The environment a task starts from, before its framework's variables and its job's ``env``.

A task of a server gets a small documented base and nothing else of the server's own
environment (its tokens, its database URL, whatever its operator exported):

- ``PATH``, ``HOME``, ``LANG``, ``USER``, ``TMPDIR``: the server's values where set,
  else ``/usr/local/bin:/usr/bin:/bin``, the user's home, ``C.UTF-8``, the user's name,
  ``/tmp``; the directory of the task python (``--task-python``, the server's own
  interpreter by default) goes first on ``PATH``, so ``python`` in a command is that one;
- ``PYTHONUNBUFFERED=1``, so that a task's prints reach its log as they happen.

A task of ``trainfleet run`` or of an embedded ``trainfleet submit`` runs in the name of
the user who typed the command, in their own shell: it starts from that whole environment,
``PATH`` included, so ``python`` is the one of their shell.

>>> base = TaskBase(inherit=False, python="/opt/py/bin/python3")
>>> env = base.environment({"PATH": "/usr/bin", "TRAINFLEET_ADMIN_TOKEN": "s3cret"})
>>> env["PATH"], "TRAINFLEET_ADMIN_TOKEN" in env
('/opt/py/bin:/usr/bin', False)
"""

from __future__ import annotations

import getpass
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainfleet.domain.errors import Misconfigured

BASE_VARIABLES = ("PATH", "HOME", "LANG", "USER", "TMPDIR")
"""What a server's task takes from the server's environment, where set."""

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class TaskBase:
    """Where a task's environment starts: the starting user's own, or the small base."""

    inherit: bool = False
    """True for the user's own runs (``trainfleet run``): their whole environment."""
    python: str | None = None
    """The interpreter whose directory goes first on ``PATH`` (a server's task python)."""

    def environment(self, source: Mapping[str, str] | None = None) -> dict[str, str]:
        """The base for one task, from ``source`` (this process's environment by default)."""
        source = os.environ if source is None else source
        if self.inherit:
            env = dict(source)
        else:
            env = {name: source[name] for name in BASE_VARIABLES if source.get(name)}
            env.setdefault("PATH", DEFAULT_PATH)
            env.setdefault("LANG", "C.UTF-8")
            env.setdefault("TMPDIR", "/tmp")
            if "HOME" not in env:  # looked up only where missing: it is once per task
                env["HOME"] = str(Path.home())
            if "USER" not in env:
                env["USER"] = getpass.getuser()
        if self.python:
            first = os.path.dirname(os.path.abspath(self.python))
            env["PATH"] = os.pathsep.join([first, env.get("PATH", DEFAULT_PATH)])
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env


SERVERS = TaskBase(python=sys.executable)
"""A server's tasks unless ``--task-python`` names another interpreter."""
USERS_OWN = TaskBase(inherit=True)
"""``trainfleet run`` and embedded submissions: the user's own shell environment."""


def server_task_base(python: str | None) -> TaskBase:
    """A server's base with ``python`` (a path, or a name on ``PATH``) as the task python.

    Raises Misconfigured naming ``--task-python`` where it is no executable file.
    """
    if not python:
        return SERVERS
    found = shutil.which(python)
    if found is None:
        raise TaskPythonError(f"--task-python: {python!r} is not an executable file")
    return TaskBase(python=found)


class TaskPythonError(Misconfigured):
    """``--task-python`` (or TRAINFLEET_TASK_PYTHON) names no executable file."""
