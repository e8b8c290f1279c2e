"""The backend a configuration names."""

from __future__ import annotations

from trainfleet.backends.api import Backend
from trainfleet.spec.backends import BackendConfig


def backend_for(
    config: BackendConfig, supervised: bool = False, log_cap: int | None = None
) -> Backend:
    """The local backend (``supervised``: tasks outlive this process; ``log_cap``: bytes a
    task's log keeps, TRAINFLEET_LOG_CAP by default), or Slurm's."""
    if config.backend == "slurm":
        from trainfleet.backends.slurm.backend import SlurmBackend

        return SlurmBackend(config.slurm, config.container_runtime)
    from trainfleet.backends.local import LocalBackend

    return LocalBackend(supervised, log_cap, config.container_runtime)
