"""A connection to one cluster's API through the official client, with every failure said
as a BackendError that names the kubeconfig and the reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from trainfleet.backends.api import BackendError
from trainfleet.spec.backends import KubernetesConfig

T = TypeVar("T")
POOL_SIZE = 16
"""Connections kept to the API for the watch and the backend's calls (logs have their own,
``logs.LogCopies``)."""


class Connection:
    """The client of one cluster, made on first use."""

    def __init__(self, config: KubernetesConfig) -> None:
        self.config = config
        self.namespace = config.namespace
        self.kubeconfig = str(Path(config.kubeconfig or "~/.kube/config").expanduser())
        self._core: Any = None

    @property
    def core(self) -> Any:
        """The ``CoreV1Api`` of the cluster; BackendError where the kubeconfig is unusable."""
        if self._core is None:
            from kubernetes import client
            from kubernetes import config as kubeconfig

            if not Path(self.kubeconfig).is_file():
                raise BackendError(
                    f"kubeconfig {self.kubeconfig}: no such file (name one: kubernetes.kubeconfig "
                    "in the config file, or KUBECONFIG)"
                )
            settings = client.Configuration()
            try:
                kubeconfig.load_kube_config(  # type: ignore[no-untyped-call]
                    self.kubeconfig, self.config.context, client_configuration=settings
                )
            except Exception as error:  # the client raises ConfigException, OSError, YAML's
                raise BackendError(f"kubeconfig {self.kubeconfig}: {_first_line(error)}") from None
            settings.connection_pool_maxsize = POOL_SIZE
            settings.retries = False  # a request fails at once; the callers try again
            self._core = client.CoreV1Api(client.ApiClient(settings))
        return self._core

    def call(self, what: str, request: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``request(*args, **kwargs)`` with the configured timeout; BackendError saying
        ``what`` failed and why (the cluster's own words where it answered)."""
        kwargs.setdefault("_request_timeout", self.config.request_timeout)
        try:
            return request(*args, **kwargs)
        except Exception as error:
            raise self.error(what, error) from None

    def error(self, what: str, error: Exception) -> BackendError:
        from kubernetes.client.exceptions import ApiException

        if isinstance(error, ApiException):
            found = ApiError(f"{what}: {_api_words(error)}")
            found.status = error.status or 0
            return found
        host = getattr(self._core.api_client.configuration, "host", "?") if self._core else "?"
        return Unanswered(
            f"{what}: the cluster at {host} (kubeconfig {self.kubeconfig}) did not answer: "
            f"{_first_line(error)}"
        )


class Unanswered(BackendError):
    """The cluster did not answer (away, or too slow): what it was asked may or may not
    have been done."""


class ApiError(BackendError):
    """The cluster answered, and refused: ``status`` is its HTTP status."""

    status: int = 0


def status_of(error: BaseException) -> int:
    """The HTTP status of a refusal; 0 where the cluster did not answer."""
    return error.status if isinstance(error, ApiError) else 0


def _api_words(error: Any) -> str:
    import json

    try:
        return str(json.loads(error.body)["message"])
    except (TypeError, ValueError, KeyError):
        return f"{error.status} {error.reason}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
