"""Backends by name (``backend:`` in the config file), each made from the settings the
assembly hands it: no backend reads the environment itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainfleet.domain.errors import Misconfigured

if TYPE_CHECKING:
    from trainfleet.backends.api import Backend
    from trainfleet.spec.backends import KubernetesConfig, SlurmConfig


@dataclass(frozen=True)
class BackendSettings:
    """What any backend may be made from."""

    supervised: bool = False
    """Tasks outlive this process (a server), and a restarted one adopts them."""
    log_cap: str | None = None
    """Bytes a task's log keeps (``512Mi``; None: the backend's default)."""
    log_cap_source: str = "TRAINFLEET_LOG_CAP"
    """Where ``log_cap`` was given, as its error names it."""
    container_runtime: str | None = None
    """``podman`` or ``docker`` (None: the one found on PATH)."""
    gpus: str | None = None
    """This machine's GPUs as configured (``TRAINFLEET_GPUS``; None: discovered)."""
    resources: str = ""
    """This machine's named resources (``TRAINFLEET_RESOURCES``: ``licence=2``)."""
    slurm: SlurmConfig | None = None
    """The ``slurm:`` section of the config file."""
    kubernetes: KubernetesConfig | None = None
    """The ``kubernetes:`` section of the config file."""
    usage_interval: str | None = None
    """Seconds between two samples of a task's resource use (``0``: none; None: the
    default, ``supervision.usage_options.USAGE_INTERVAL``)."""
    usage_interval_source: str = "TRAINFLEET_USAGE_INTERVAL"
    """Where ``usage_interval`` was given, as its error names it."""
    gpu_sharing: str | None = None
    """How fractions of a GPU share it here: ``mps`` or ``counted`` (None: ``mps`` where
    NVIDIA MPS is installed, else fractions are refused)."""
    gpu_sharing_source: str = "TRAINFLEET_GPU_SHARING"
    """Where ``gpu_sharing`` was given, as its error names it."""

    def sample_every(self) -> float:
        """``usage_interval`` in seconds; UsageIntervalError naming where it was given."""
        from trainfleet.backends.supervision.usage_options import usage_interval_setting

        return usage_interval_setting(self.usage_interval, self.usage_interval_source)


Factory = Callable[[BackendSettings], "Backend"]


def _local(settings: BackendSettings) -> Backend:
    from trainfleet.backends.local import LocalBackend
    from trainfleet.backends.local.processes import log_cap_setting

    return LocalBackend(
        settings.supervised,
        log_cap_setting(settings.log_cap, settings.log_cap_source),
        settings.container_runtime,
        gpus=settings.gpus,
        resources=settings.resources,
        usage_interval=settings.sample_every(),
        gpu_sharing=settings.gpu_sharing,
        gpu_sharing_source=settings.gpu_sharing_source,
    )


def _slurm(settings: BackendSettings) -> Backend:
    from trainfleet.backends.slurm.backend import SlurmBackend
    from trainfleet.spec.backends import SlurmConfig

    return SlurmBackend(
        settings.slurm or SlurmConfig(), settings.container_runtime, settings.sample_every()
    )


def _kubernetes(settings: BackendSettings) -> Backend:
    from trainfleet.backends.kubernetes.backend import KubernetesBackend
    from trainfleet.spec.backends import KubernetesConfig

    return KubernetesBackend(settings.kubernetes or KubernetesConfig(), settings.supervised)


BACKENDS: dict[str, Factory] = {"local": _local, "slurm": _slurm, "kubernetes": _kubernetes}
"""Each backend's factory, by the name the config file gives it; each imports its
backend only when called, so naming one costs nothing."""


class UnknownBackend(Misconfigured):
    """A backend name the registry does not hold."""


def make_backend(name: str, settings: BackendSettings) -> Backend:
    """The backend called ``name``, made from ``settings``."""
    factory = BACKENDS.get(name)
    if factory is None:
        raise UnknownBackend(f"backend: no backend {name!r} (known: {', '.join(BACKENDS)})")
    return factory(settings)
