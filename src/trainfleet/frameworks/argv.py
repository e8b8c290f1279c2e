"""A task's command line, with Submarine's ``%input_path%`` and ``%checkpoint_path%`` filled in.

The placeholders are replaced as plain text, in an argv list or a shell string alike: quote
them in a shell command yourself when a path may hold spaces (``--data "%input_path%"``).
"""

from __future__ import annotations

import re

from trainfleet.frameworks.base import TaskContext

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

    return [PLACEHOLDER.sub(fill, word) for word in argv]
