"""A role that runs a notebook headless (``notebook: train.ipynb``, ``parameters:``).

Its command is made from them: ``trainfleet run-notebook --parameters JSON NOTEBOOK``,
the program ``programs/run_notebook.py`` under the task's own ``python3``.

>>> notebook_argv("train.ipynb", {"lr": 0.1})
['trainfleet', 'run-notebook', '--parameters', '{"lr":0.1}', 'train.ipynb']
"""

from __future__ import annotations

import json
import keyword
from typing import Any

from trainfleet.spec.names import relative_inside

PROGRAM_WORDS = ("trainfleet", "run-notebook")
"""The command, made standalone at launch (``frameworks.argv``)."""


def notebook_argv(notebook: str, parameters: dict[str, Any]) -> list[str]:
    """The role's command for ``notebook`` with ``parameters``."""
    text = json.dumps(parameters, separators=(",", ":"), sort_keys=True, default=str)
    return [*PROGRAM_WORDS, "--parameters", text, notebook]


def with_command(data: dict[str, Any]) -> dict[str, Any]:
    """A role as written, with the command its ``notebook`` makes (a role read back, its
    command already made, is left as it is); ValueError for a command beside a notebook."""
    notebook, parameters = data.get("notebook"), data.get("parameters") or {}
    if notebook is None:
        if parameters:
            raise ValueError("parameters: only a role with a notebook takes parameters")
        return data
    if not isinstance(notebook, str) or not isinstance(parameters, dict):
        return data  # the fields' own checks say what is wrong
    made = notebook_argv(notebook, parameters)
    if data.get("command") not in (None, made):
        raise ValueError("command: give a notebook or a command, not both")
    return {**data, "command": made}


def checked_notebook(value: str) -> str:
    """A notebook inside the job's folder: a relative ``.ipynb`` path."""
    if not relative_inside(value) or not value.endswith(".ipynb"):
        raise ValueError(
            f"notebook {value!r} must be a .ipynb file inside the job's directory (a relative path)"
        )
    return value


def checked_parameter(name: str) -> str:
    """A parameter's name: a Python identifier, assigned in the injected cell."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"parameter {name!r} is not a Python name (it is assigned in a cell)")
    return name
