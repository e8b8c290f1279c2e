"""The local backend: tasks as process groups on this machine."""

from trainfleet.backends.local.processes import LocalBackend

__all__ = ["LocalBackend"]
