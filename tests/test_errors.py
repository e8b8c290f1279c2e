"""One error hierarchy: every error trainfleet raises is answered by the server with its
kind's status and by the CLI with its kind's exit code, never a 500 or a traceback."""

from __future__ import annotations

import importlib
import pkgutil

import click
import pytest
from click.testing import CliRunner
from fastapi import FastAPI
from fastapi.testclient import TestClient

import trainfleet
from trainfleet.backends.api import BackendError
from trainfleet.backends.local.gpus import GpuConfigError
from trainfleet.cli.commands import user_errors
from trainfleet.client import ClientError, NotFound, ServerError, Unreachable, Untrusted
from trainfleet.datadir.space import DiskFull
from trainfleet.domain import errors
from trainfleet.domain.records import JobActive, JobNotFound
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.server import errors as server_errors
from trainfleet.spec.errors import SpecError
from trainfleet.store.errors import StoreConflict, StoreUnavailable

KINDS = {
    errors.BadInput: (422, 2),
    errors.Unauthorized: (401, 2),
    errors.Forbidden: (403, 2),
    errors.NotFound: (404, 2),
    errors.Conflict: (409, 2),
    errors.Unavailable: (503, 1),
    errors.Misconfigured: (503, 2),
    errors.StorageFull: (507, 2),
}


def _every_error() -> list[type[errors.TrainfleetError]]:
    """Every subclass of TrainfleetError defined anywhere in trainfleet."""
    for module in pkgutil.walk_packages(trainfleet.__path__, "trainfleet."):
        if ".migrations." not in module.name and "__main__" not in module.name:
            importlib.import_module(module.name)
    found, todo = [], [errors.TrainfleetError]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return sorted(set(found), key=lambda kind: kind.__qualname__)


def _instance(kind: type[errors.TrainfleetError]) -> errors.TrainfleetError:
    if issubclass(kind, SpecError):
        return SpecError.one("boom", field="roles")
    if kind is ServerError:
        return ServerError("boom", 500)
    if kind is Untrusted:
        return Untrusted("https://host", "boom")
    return kind("boom")


ERRORS = [
    kind
    for kind in _every_error()
    # The server's ApiError and the SDK's base carry a status of their own instead.
    if kind not in KINDS and kind not in (server_errors.ApiError, ClientError, ServerError)
]


def test_every_error_is_of_a_kind() -> None:
    """A new error class must subclass one of the kinds, or the faces cannot tell what it is."""
    assert len(ERRORS) >= 15  # the walk found the package's errors
    for kind in ERRORS:
        assert any(issubclass(kind, base) for base in KINDS), kind


@pytest.mark.parametrize("kind", ERRORS, ids=lambda kind: kind.__qualname__)
def test_server_answers_each_error_with_its_kind(kind: type[errors.TrainfleetError]) -> None:
    app = FastAPI()
    server_errors.install(app)

    @app.get("/boom")
    def boom() -> None:
        raise _instance(kind)

    answer = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert answer.status_code == _instance(kind).status != 500
    assert "boom" in answer.json()["detail"]
    if answer.status_code == 503:
        assert answer.headers["Retry-After"]


@pytest.mark.parametrize(
    ("kind", "status", "exit_code"),
    [
        (SpecError, 422, 2),
        (Unschedulable, 422, 2),
        (JobNotFound, 404, 2),
        (JobActive, 409, 2),
        (StoreConflict, 409, 2),  # a StoreError, but a conflict first
        (StoreUnavailable, 503, 1),
        (BackendError, 503, 2),
        (GpuConfigError, 503, 2),
        (DiskFull, 507, 2),
        (NotFound, 404, 2),  # the SDK's: the same kind as the engine's
        (Unreachable, 503, 2),
        (ServerError, 500, 1),
    ],
)
def test_known_errors_map_as_documented(
    kind: type[errors.TrainfleetError], status: int, exit_code: int
) -> None:
    error = _instance(kind)
    assert (error.status, error.exit_code) == (status, exit_code)


@pytest.mark.parametrize("kind", ERRORS, ids=lambda kind: kind.__qualname__)
def test_cli_exits_with_each_errors_code(kind: type[errors.TrainfleetError]) -> None:
    error = _instance(kind)

    @click.command()
    def boom() -> None:
        with user_errors():
            raise error

    result = CliRunner().invoke(boom)
    assert result.exit_code == error.exit_code in (1, 2)
    assert "boom" in result.output and "Traceback" not in result.output
