"""A job's services that people open in a browser (its TensorBoard), as the faces show them."""

from __future__ import annotations

from dataclasses import dataclass

from trainfleet.domain.records import State


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceLink:
    """One service of a job: where a server serves it, and whether it runs now."""

    name: str
    """The service (``tensorboard``), also its task's role."""
    path: str
    """Where a trainfleet server proxies it: ``/jobs/<id>/tensorboard/``."""
    state: State
    """Its task's state: only a running one answers."""
    reason: str = ""
    address: str = ""
    """Where its task listens (``127.0.0.1:PORT`` of its machine); "" before it starts."""
    url: str = ""
    """Where this client opens it (filled in by the CLI: the server's URL, or loopback)."""

    @property
    def port(self) -> int | None:
        """Its task's port, where it has one."""
        _, _, port = self.address.rpartition(":")
        return int(port) if port.isdigit() else None
