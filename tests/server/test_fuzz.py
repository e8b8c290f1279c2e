"""Property-based fuzzing of every operation in the OpenAPI document (schemathesis).

Each operation gets valid and invalid parameters and bodies, with the admin token: no
answer may be a 5xx, every answer must match the document, and schemathesis's
``ignored_auth`` check repeats each 2xx without a token and with a wrong one, which must
get 401. The fuzzed server stores jobs but does not start them: hypothesis-made commands
are not run on this machine (the other tests run real jobs).

Operations are listed here, and checked against the document, because schemathesis's
lazy pytest loader does not work with this pytest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from unittest.mock import ANY

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode, checks
from schemathesis.core.parameters import ParameterLocation

from trainfleet.control.assembly import engine_at

from .harness import LiveServer

JOB = "/api/v1/jobs/{job_id}"
LOG = f"{JOB}/tasks/{{role}}/{{index}}/log"
OPERATIONS = [
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("POST", "/api/v1/jobs"),
    ("GET", "/api/v1/jobs"),
    ("GET", JOB),
    ("DELETE", JOB),
    ("POST", f"{JOB}/cancel"),
    ("GET", f"{JOB}/events"),
    ("GET", f"{JOB}/events/follow"),
    ("GET", "/api/v1/events/follow"),
    ("GET", LOG),
    ("GET", f"{LOG}/follow"),
    ("GET", f"{JOB}/setup/log"),
    ("GET", f"{JOB}/usage"),
    ("GET", f"{LOG}/search"),
    ("GET", f"{LOG}/download"),
    ("GET", f"{JOB}/outputs"),
    ("GET", f"{JOB}/outputs/{{name}}"),
    ("GET", "/api/v1/session"),
    ("POST", "/api/v1/session"),
    ("DELETE", "/api/v1/session"),
    ("GET", "/api/v1/queues"),
    ("GET", "/api/v1/queues/{name}"),
    ("GET", "/api/v1/queues/{name}/would-start"),
    ("PUT", "/api/v1/queues/{name}"),
    ("GET", "/api/v1/gpus"),
    ("POST", "/api/v1/gpus/{index}/clear"),
    ("HEAD", "/api/v1/workdirs/{tree}"),
    ("PUT", "/api/v1/workdirs/{tree}"),
    ("GET", "/api/v1/jobs/{job_id}/workdir"),  # a job's token, no member's
    ("GET", "/api/v1/whoami"),
    ("GET", "/api/v1/users"),
    ("POST", "/api/v1/users"),
    ("POST", "/api/v1/users/{name}/disable"),
    ("GET", "/api/v1/teams"),
    ("POST", "/api/v1/teams"),
    ("GET", "/api/v1/teams/{name}"),
    ("PUT", "/api/v1/teams/{name}/members/{user}"),
    ("DELETE", "/api/v1/teams/{name}/members/{user}"),
    ("GET", "/api/v1/tokens"),
    ("POST", "/api/v1/tokens"),
    ("DELETE", "/api/v1/tokens/{token_id}"),
    ("GET", "/api/v1/secrets"),
    ("POST", "/api/v1/secrets"),
    ("DELETE", "/api/v1/secrets/{team}/{name}"),
    ("GET", "/api/v1/audit"),
    ("POST", "/api/v1/workflows"),
    ("GET", "/api/v1/workflows"),
    ("GET", "/api/v1/workflows/{team}/{name}"),
    ("DELETE", "/api/v1/workflows/{team}/{name}"),
    ("POST", "/api/v1/workflows/{team}/{name}/runs"),
    ("GET", "/api/v1/workflows/{team}/{name}/runs"),
    ("POST", "/api/v1/workflows/{team}/{name}/pause"),
    ("POST", "/api/v1/workflows/{team}/{name}/resume"),
    ("GET", "/api/v1/workflow-runs/{run_id}"),
    ("POST", "/api/v1/workflow-runs/{run_id}/stop"),
    ("POST", "/api/v1/workflow-runs/{run_id}/retry"),
]
SIGN_IN = ("post", "/api/v1/session")
"""The one operation that takes its token in its body (it makes a session of it)."""
EXAMPLES = int(os.environ.get("TRAINFLEET_FUZZ_EXAMPLES", "30"))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("fuzz") / "data"
    engine = engine_at(data, vault=True)
    engine.start = lambda job_id: None  # type: ignore[method-assign]  # stored, never started
    server = LiveServer(data, engine).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api(fuzzed: LiveServer) -> Any:
    return schemathesis.openapi.from_url(f"{fuzzed.url}/api/v1/openapi.json")


def test_every_operation_of_the_document_is_fuzzed_and_all_but_health_need_a_token(
    api: Any,
) -> None:
    operations = {(op.ok().method.upper(), op.ok().path) for op in api.get_all_operations()}
    assert operations == set(OPERATIONS)
    document = api.raw_schema
    assert document["components"]["securitySchemes"] == {
        "HTTPBearer": {"type": "http", "scheme": "bearer", "description": ANY}
    }
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            public = path in ("/healthz", "/readyz") or (method, path) == SIGN_IN
            wanted = [] if public else [{"HTTPBearer": []}]
            assert operation.get("security", []) == wanted, path


ENDLESS = {("GET", "/api/v1/events/follow")}
"""A stream that never ends by itself (each example would wait for its timeout): its bad
input is tried in test_changes.py."""
FUZZED = [operation for operation in OPERATIONS if operation not in ENDLESS]


@pytest.mark.parametrize(("method", "path"), FUZZED, ids=[f"{m} {p}" for m, p in FUZZED])
def test_no_server_error_and_no_access_without_a_token(
    api: Any, fuzzed: LiveServer, method: str, path: str
) -> None:
    operation = api[path][method]
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )
    auth = {"Authorization": f"Bearer {fuzzed.token}"}

    @given(case=cases)
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    def fuzz(case: Any) -> None:
        # A valid token for each case, but where the case is about a bad or missing one:
        # given then, it would turn a request that must be refused into a good one.
        header = case.meta.components.get(ParameterLocation.HEADER) if case.meta else None
        bad_token = header is not None and header.mode is GenerationMode.NEGATIVE
        headers = None if bad_token else auth
        case.call_and_validate(headers=headers, timeout=30, excluded_checks=excluded)

    # A job's (or a workflow's) text is a document whose validity no schema of a string
    # can express; nor can a schema say which workflows and runs exist.
    # Nor can a schema say which bytes are a tar.gz of the tree that a digest names, or
    # that a new user's or secret's team must exist.
    # Nor which tokens are valid ones to sign in with.
    free_form = (
        "/api/v1/jobs",
        "/api/v1/workdirs/{tree}",
        "/api/v1/users",
        "/api/v1/secrets",
        "/api/v1/session",
        "/api/v1/queues/{name}/would-start",  # nor an amount's bounds (2, 500m, 8Gi)
        "/api/v1/workflows",
    )
    excluded = [checks.positive_data_acceptance] if path in free_form else []

    fuzz()
