"""trainfleet: distributed deep-learning training with one command.

``trainfleet.run(fn, *args, workers=4)`` calls a function as a distributed job on this
machine (``trainfleet.client.Client.run`` does it through a server); ``RemoteError`` is
what a failed call raises. Both are imported on first use: ``import trainfleet`` stays
light for the tasks that only use ``trainfleet.checkpoint``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RemoteError", "run"]


def __getattr__(name: str) -> Any:
    if name == "run":
        from trainfleet.cli.functions import run

        return run
    if name == "RemoteError":
        from trainfleet.domain.errors import RemoteError

        return RemoteError
    raise AttributeError(f"module 'trainfleet' has no attribute {name!r}")
