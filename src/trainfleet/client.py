"""The Python SDK: a trainfleet server's REST API as typed methods.

>>> with Client("http://127.0.0.1:8080", token) as client:   # doctest: +SKIP
...     job = client.submit(open("job.yaml").read(), workdir="/srv/train")
...     for line in client.follow_log(job.id, "worker", 0):
...         print(line, end="")
...     client.get(job.id).state
'succeeded'

Failures raise ClientError subclasses whose message is what the CLI prints after
``error:``: BadRequest (with the spec's ``problems``), Unauthorized, NotFound, Conflict.

Over HTTPS the server's certificate is verified, against ``ca_cert`` when given (a server
whose certificate a private CA signed), else against the usual trusted CAs; a certificate
that fails raises Untrusted. There is no way to turn verification off.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from httpx_sse import ServerSentEvent, connect_sse
from pydantic import TypeAdapter, ValidationError

from trainfleet.datadir.logs import CHUNK, LogTail
from trainfleet.domain import errors
from trainfleet.domain.errors import TrainfleetError
from trainfleet.domain.records import (
    AuditRecord,
    EventRecord,
    JobPage,
    JobRecord,
    State,
    TaskRecord,
)
from trainfleet.domain.workflow_records import (
    RunDetails,
    RunRecord,
    RunState,
    WorkflowDetails,
    WorkflowSubmitted,
    WorkflowSummary,
)
from trainfleet.spec.models import JobSpec
from trainfleet.wire import (
    API_PREFIX,
    AuditPage,
    ErrorBody,
    FeedNotice,
    GpuState,
    JobDetails,
    JobUsage,
    LogChunk,
    MemberBody,
    NewToken,
    NewUser,
    OutputFile,
    Problem,
    QueueBody,
    QueueState,
    SecretView,
    Submitted,
    TeamBody,
    TeamView,
    TokenBody,
    TokenView,
    UserBody,
    UserView,
    WhoAmI,
)

__all__ = [
    "BadRequest",
    "Client",
    "ClientError",
    "Conflict",
    "Forbidden",
    "InsufficientStorage",
    "NotFound",
    "ServerError",
    "Unauthorized",
    "Unreachable",
    "Untrusted",
]

log = logging.getLogger("trainfleet.client")

T = TypeVar("T")
_ADAPTERS: dict[object, TypeAdapter[Any]] = {}
SERVER_VARIABLE, TOKEN_VARIABLE = "TRAINFLEET_SERVER", "TRAINFLEET_TOKEN"
"""Where ``Client()`` finds its server and token when given none."""
CA_VARIABLE = "TRAINFLEET_CA_CERT"
"""Where it finds the CA certificate file to verify an HTTPS server with, given none."""
RECONNECTS = 3
"""How often a follow resumes (from its last offset or event) after the connection drops."""
SUBMIT_TRIES = 5
"""How often a submission is sent in all while its answer is lost (``_answer_lost``): with
the same Idempotency-Key each time, so the job is stored once (about 8 s of patience)."""
GATEWAY_ERRORS = frozenset({502, 503, 504})


class ClientError(TrainfleetError):
    """The server refused or failed a request; ``str()`` is its message.

    Each kind is also the kind of error trainfleet raises for the same failure without a
    server (``NotFound`` is an ``errors.NotFound``), so callers handle both alike.
    """

    def __init__(
        self, message: str, status: int = 0, problems: list[Problem] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if status:
            self.status = status
        self.problems = problems or []


class BadRequest(ClientError, errors.BadInput):
    """Bad input (400, 413, 415, 416, 422): a job that cannot be read, a bad parameter."""


class Unauthorized(ClientError, errors.Unauthorized):
    """No token, or one the server does not know or has revoked (401)."""


class Forbidden(ClientError, errors.Forbidden):
    """The caller's role does not allow it; the message names the role needed (403)."""


class NotFound(ClientError, errors.NotFound):
    """No such job or task (404)."""


class Conflict(ClientError, errors.Conflict):
    """The job's state forbids it, such as deleting a running job without force (409)."""


class InsufficientStorage(ClientError, errors.StorageFull):
    """The server's disk is full: it stores no new job until space is freed (507)."""


class ServerError(ClientError):
    """The server failed (5xx)."""


class Unreachable(ClientError, errors.Unavailable):
    """No answer from the server: it is down, or the URL is wrong."""

    exit_code = errors.USAGE_ERROR


class Untrusted(Unreachable):
    """The server's certificate failed verification (``reason`` says how): an unknown CA,
    a name it is not for, expired; pass ``ca_cert`` when a private CA signed it."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot verify the server's certificate ({url}): {reason}")
        self.url, self.reason = url, reason


_BY_STATUS: dict[int, type[ClientError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: BadRequest,
    415: BadRequest,
    416: BadRequest,
    422: BadRequest,
    507: InsufficientStorage,
}


class Client:
    """A connection to one server, authenticated by one token; close it, or use ``with``."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        on_warning: Callable[[str], None] | None = None,
        transport: httpx.BaseTransport | None = None,
        ca_cert: str | os.PathLike[str] | None = None,
    ) -> None:
        """``ca_cert``: a PEM file of the CA(s) that signed an HTTPS server's certificate,
        trusted instead of the usual ones; BadInput when it cannot be loaded. ``url``,
        ``token`` and ``ca_cert`` left out: ``TRAINFLEET_SERVER``, ``TRAINFLEET_TOKEN`` and
        ``TRAINFLEET_CA_CERT`` (as a trainfleet notebook has them)."""
        url = url or os.environ.get(SERVER_VARIABLE)
        if not url:
            raise errors.BadInput(f"url: no server given, and {SERVER_VARIABLE} is not set")
        token = token if token is not None else os.environ.get(TOKEN_VARIABLE)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.on_warning = on_warning or log.warning
        ca_cert = ca_cert if ca_cert is not None else os.environ.get(CA_VARIABLE) or None
        verify = trusting(ca_cert) if ca_cert is not None else True
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=transport, verify=verify
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- jobs -----------------------------------------------------------------

    def health(self) -> bool:
        """Whether the server answers (needs no token)."""
        return self._request("GET", "/healthz").status_code == 200

    def submit(
        self,
        job: str | bytes | JobSpec,
        *,
        workdir: str | os.PathLike[str] | None = None,
        server_workdir: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        idempotency_key: str | None = None,
    ) -> JobRecord:
        """Submit a job (YAML or JSON text, a Kubeflow manifest, or a JobSpec); it starts at once.

        ``workdir``: a directory here, sent to the server (see ``upload_workdir``); the job
        runs in its own copy of it. ``server_workdir``: a directory on the server, which the
        job runs in as it is (a shared file system). Neither: the server's own directory.
        ``filename`` names the text in errors. Warnings about how the job was read go to
        ``on_warning``.

        Where the answer is lost (the connection broke, a 502, 503 or 504), the submission is
        sent again with the same ``idempotency_key`` (a new one by default): the server
        stores the job once and answers with it. Give your own key to submit the same job
        again safely across calls, even across processes.
        """
        if workdir is not None and server_workdir is not None:
            raise errors.BadInput("give workdir (sent) or server_workdir (in place), not both")
        tree = self.upload_workdir(workdir) if workdir is not None else None
        return self._submit(job, tree, server_workdir, filename, idempotency_key)

    def _submit(
        self,
        job: str | bytes | JobSpec,
        tree: str | None,
        server_workdir: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        idempotency_key: str | None = None,
    ) -> JobRecord:
        if isinstance(job, JobSpec):
            content, media_type = job.model_dump_json().encode(), "application/json"
        else:
            content = job.encode() if isinstance(job, str) else job
            media_type = "application/yaml"
        params = {"workdir": os.fspath(server_workdir) if server_workdir is not None else None}
        params["tree"], params["filename"] = tree, filename
        key = idempotency_key or str(uuid.uuid4())
        response = self._request_again_while_lost(
            "POST",
            f"{API_PREFIX}/jobs",
            content=content,
            headers={"Content-Type": media_type, "Idempotency-Key": key},
            params={name: value for name, value in params.items() if value is not None},
        )
        submitted = _parse(Submitted, response)
        for warning in submitted.warnings:
            self.on_warning(warning)
        return submitted.job

    def upload_workdir(
        self,
        folder: str | os.PathLike[str],
        cap: int | None = None,
        *,
        extra: Mapping[str, bytes] | None = None,
    ) -> str:
        """Send a job's directory, less what its ``.gitignore`` and ``.trainfleetignore``
        files leave behind, with ``extra`` files (path: content) in it, unless the server
        has the same tree already; returns its digest.

        Raises BadInput for a folder over ``cap`` bytes (TRAINFLEET_MAX_WORKDIR, else
        100 MiB; the server holds its own cap too) or an ignore file with a bad pattern.
        """
        from trainfleet.workdirs.pack import CAP_VARIABLE, client_cap, pack

        top = Path(folder).resolve()
        if not top.is_dir():
            raise errors.BadInput(f"workdir: {os.fspath(folder)!r} is not a directory")
        with tempfile.TemporaryDirectory(prefix="trainfleet-upload-") as scratch:
            cap = cap or client_cap(os.environ.get(CAP_VARIABLE))
            packed = pack(top, cap, Path(scratch) / "workdir.tar.gz", extra)
            for path in packed.left_out:
                self.on_warning(f"{path} is not sent: a link that leads out of {top}")
            path = f"{API_PREFIX}/workdirs/{packed.digest}"
            try:
                known = self._http.head(path).status_code == 200
            except httpx.TransportError as error:
                raise self._unreachable(error) from None
            if not known:
                with open(packed.archive, "rb") as archive:
                    headers = {"Content-Type": "application/octet-stream"}
                    self._request("PUT", path, content=archive, headers=headers)
        return packed.digest

    def find(
        self,
        *,
        state: State | str | None = None,
        name: str | None = None,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        team: str | None = None,
        queue: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of jobs, newest first; pass its ``next_cursor`` for the next. Its
        ``counts``: how many jobs match every filter but ``state``, by state."""
        params: dict[str, Any] = {"limit": limit}
        given = {"state": state, "name": name, "user": user, "team": team, "queue": queue}
        for key, value in {**given, "cursor": cursor}.items():
            if value is not None:
                params[key] = str(value)
        if labels:
            params["label"] = [f"{key}={value}" for key, value in labels.items()]
        return _parse(JobPage, self._request("GET", f"{API_PREFIX}/jobs", params=params))

    def list_jobs(
        self,
        *,
        state: State | str | None = None,
        name: str | None = None,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        team: str | None = None,
        queue: str | None = None,
        page_size: int = 100,
    ) -> Iterator[JobRecord]:
        """Every job that matches, newest first, fetched a page at a time."""
        cursor: str | None = None
        while True:
            page = self.find(
                state=state,
                name=name,
                user=user,
                labels=labels,
                team=team,
                queue=queue,
                limit=page_size,
                cursor=cursor,
            )
            yield from page.jobs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get(self, job_id: str) -> JobRecord:
        return self.describe(job_id).job

    def describe(self, job_id: str) -> JobDetails:
        """A job with its tasks and events."""
        return _parse(JobDetails, self._request("GET", self._job(job_id)))

    def cancel(self, job_id: str) -> JobRecord:
        """Stop a job; returns it as it is right after the request (it ends shortly)."""
        return _parse(JobRecord, self._request("POST", f"{self._job(job_id)}/cancel"))

    def delete(self, job_id: str, *, force: bool = False) -> None:
        """Forget an ended job and its logs; ``force`` stops a running job first."""
        params = {"force": "true"} if force else {}
        self._request("DELETE", self._job(job_id), params=params)

    def events(self, job_id: str, after: int = 0) -> list[EventRecord]:
        """A job's events with an id above ``after``, oldest first."""
        response = self._request("GET", f"{self._job(job_id)}/events", params={"after": after})
        return _parse(list[EventRecord], response)

    def usage(self, job_id: str, *, history: bool = False, since: float = 0.0) -> JobUsage:
        """What each task of a job uses: the newest sample of each running task (CPU in
        percent of a core, RSS, GPU utilisation and memory); ``history``: and each task's
        history from ``since`` (seconds since the epoch), minute averages then samples."""
        params: dict[str, Any] = {"history": "true"} if history else {}
        if since:
            params["since"] = since
        return _parse(JobUsage, self._request("GET", f"{self._job(job_id)}/usage", params=params))

    # -- queues ---------------------------------------------------------------

    def queues(self) -> list[QueueState]:
        """Every queue, with what it uses and its jobs."""
        return _parse(list[QueueState], self._request("GET", f"{API_PREFIX}/queues"))

    def queue(self, name: str) -> QueueState:
        return _parse(QueueState, self._request("GET", self._queue(name)))

    def put_queue(self, name: str, config: QueueBody) -> QueueState:
        """Create a queue or replace its configuration (a team-admin of its team)."""
        body = config.model_dump(mode="json", exclude_none=True)
        return _parse(QueueState, self._request("PUT", self._queue(name), json=body))

    # -- GPUs -------------------------------------------------------------------

    def gpus(self) -> list[GpuState]:
        """Each GPU of the server's machine: model, memory, use, health, its tasks."""
        return _parse(list[GpuState], self._request("GET", f"{API_PREFIX}/gpus"))

    def clear_gpu(self, index: int) -> GpuState:
        """Mark GPU ``index`` healthy again: its present problems are ignored (an
        administrator)."""
        return _parse(GpuState, self._request("POST", f"{API_PREFIX}/gpus/{int(index)}/clear"))

    # -- users, teams and tokens ----------------------------------------------

    def whoami(self) -> WhoAmI:
        """The caller's user, token and teams."""
        return _parse(WhoAmI, self._request("GET", f"{API_PREFIX}/whoami"))

    def users(self) -> list[UserView]:
        """Every user (administrators only)."""
        return _parse(list[UserView], self._request("GET", f"{API_PREFIX}/users"))

    def create_user(self, user: UserBody) -> NewUser:
        """Make a user and its first token (shown this once; administrators only)."""
        body = user.model_dump(mode="json", exclude_none=True)
        return _parse(NewUser, self._request("POST", f"{API_PREFIX}/users", json=body))

    def disable_user(self, name: str) -> UserView:
        """Disable a user: its tokens stop working (administrators only)."""
        path = f"{API_PREFIX}/users/{_segment(name)}/disable"
        return _parse(UserView, self._request("POST", path))

    def teams(self) -> list[TeamView]:
        """The caller's teams (every team, for an administrator)."""
        return _parse(list[TeamView], self._request("GET", f"{API_PREFIX}/teams"))

    def team(self, name: str) -> TeamView:
        return _parse(TeamView, self._request("GET", self._team(name)))

    def create_team(self, name: str) -> TeamView:
        """Make a team, with a default queue of its name (administrators only)."""
        body = TeamBody(name=name).model_dump(mode="json")
        return _parse(TeamView, self._request("POST", f"{API_PREFIX}/teams", json=body))

    def set_member(self, team: str, user: str, role: str = "member") -> TeamView:
        """Add ``user`` to ``team`` with ``role``, or change its role (a team-admin)."""
        body = MemberBody.model_validate({"role": role}).model_dump(mode="json")
        path = f"{self._team(team)}/members/{_segment(user)}"
        return _parse(TeamView, self._request("PUT", path, json=body))

    def remove_member(self, team: str, user: str) -> None:
        """Take ``user`` out of ``team`` (a team-admin)."""
        self._request("DELETE", f"{self._team(team)}/members/{_segment(user)}")

    def tokens(self) -> list[TokenView]:
        """The caller's tokens, revoked ones included."""
        return _parse(list[TokenView], self._request("GET", f"{API_PREFIX}/tokens"))

    def create_token(self, name: str) -> NewToken:
        """Make a token of the caller's user; its secret is shown this once."""
        body = TokenBody(name=name).model_dump(mode="json")
        return _parse(NewToken, self._request("POST", f"{API_PREFIX}/tokens", json=body))

    def revoke_token(self, token_id: str) -> None:
        self._request("DELETE", f"{API_PREFIX}/tokens/{_segment(token_id)}")

    # -- secrets --------------------------------------------------------------

    def secrets(self) -> list[SecretView]:
        """The secrets of the caller's teams: names and keys, never values."""
        return _parse(list[SecretView], self._request("GET", f"{API_PREFIX}/secrets"))

    def create_secret(
        self, name: str, data: Mapping[str, str], team: str | None = None
    ) -> SecretView:
        """Store a secret of ``team`` (default: the caller's only team), encrypted."""
        body = {"name": name, "data": dict(data), **({"team": team} if team else {})}
        return _parse(SecretView, self._request("POST", f"{API_PREFIX}/secrets", json=body))

    def delete_secret(self, team: str, name: str) -> None:
        self._request("DELETE", f"{API_PREFIX}/secrets/{_segment(team)}/{_segment(name)}")

    # -- workflows --------------------------------------------------------------

    def submit_workflow(
        self,
        workflow: str | os.PathLike[str],
        *,
        params: Mapping[str, str] | None = None,
        team: str | None = None,
        run: bool = True,
        send_folder: bool = True,
    ) -> WorkflowSubmitted:
        """Store the workflow file at ``workflow`` on the server with its folder (sent as
        ``upload_workdir`` sends a job's; ``send_folder`` False: none, its steps start in
        empty folders), replacing the one of its name in ``team`` (default: the caller's
        only team); without a schedule, and with ``run``, a run of it starts at once with
        ``params`` over its defaults."""
        path = Path(workflow)
        text = path.read_bytes()
        query = {"filename": str(path), "run": str(run).lower()}
        if send_folder:
            query["tree"] = self.upload_workdir(path.resolve().parent)
        query |= {"team": team} if team else {}
        response = self._request(
            "POST",
            f"{API_PREFIX}/workflows",
            content=text,
            headers={"Content-Type": "application/yaml"},
            params=[*query.items(), *(("param", f"{k}={v}") for k, v in (params or {}).items())],
        )
        return _parse(WorkflowSubmitted, response)

    def workflows(self, team: str | None = None) -> list[WorkflowSummary]:
        """The workflows of the caller's teams (of ``team`` only), by team and name, each
        with its schedule, next time and latest run."""
        params = {"team": team} if team else {}
        response = self._request("GET", f"{API_PREFIX}/workflows", params=params)
        return _parse(list[WorkflowSummary], response)

    def workflow(self, team: str, name: str) -> WorkflowDetails:
        """A workflow with its schedule, next run times and latest runs."""
        return _parse(WorkflowDetails, self._request("GET", self._workflow(team, name)))

    def run_workflow(
        self, team: str, name: str, params: Mapping[str, str] | None = None
    ) -> RunRecord:
        """Start a run of a stored workflow now."""
        query = [("param", f"{k}={v}") for k, v in (params or {}).items()]
        response = self._request("POST", f"{self._workflow(team, name)}/runs", params=query)
        return _parse(RunRecord, response)

    def workflow_runs(self, team: str, name: str, limit: int = 50) -> list[RunRecord]:
        """A workflow's runs, newest first."""
        response = self._request(
            "GET", f"{self._workflow(team, name)}/runs", params={"limit": limit}
        )
        return _parse(list[RunRecord], response)

    def pause_workflow(self, team: str, name: str) -> WorkflowDetails:
        response = self._request("POST", f"{self._workflow(team, name)}/pause")
        return _parse(WorkflowDetails, response)

    def resume_workflow(self, team: str, name: str) -> WorkflowDetails:
        response = self._request("POST", f"{self._workflow(team, name)}/resume")
        return _parse(WorkflowDetails, response)

    def delete_workflow(self, team: str, name: str) -> None:
        self._request("DELETE", self._workflow(team, name))

    def workflow_run(self, run_id: str) -> RunDetails:
        """A run with each of its steps."""
        return _parse(RunDetails, self._request("GET", self._run(run_id)))

    def stop_run(self, run_id: str) -> RunDetails:
        return _parse(RunDetails, self._request("POST", f"{self._run(run_id)}/stop"))

    def retry_run(self, run_id: str, start_from: str | None = None) -> RunDetails:
        """Run again what did not succeed (or ``start_from`` a step and all after it)."""
        params = {"from": start_from} if start_from else {}
        response = self._request("POST", f"{self._run(run_id)}/retry", params=params)
        return _parse(RunDetails, response)

    def wait_run(self, run_id: str, interval: float = 0.5) -> RunDetails:
        """The run once it has ended."""
        while True:
            details = self.workflow_run(run_id)
            if RunState(details.run.state).is_final:
                return details
            time.sleep(interval)

    # -- the audit trail --------------------------------------------------------

    def audit_page(
        self,
        *,
        user: str | None = None,
        action: str | None = None,
        since: float | datetime.datetime | None = None,
        team: str | None = None,
        limit: int = 100,
        before: int | None = None,
    ) -> AuditPage:
        """One page of audit records, newest first; pass its ``next_before`` as ``before``
        for the next. ``since``: a Unix time, or a datetime (naive: local time)."""
        if isinstance(since, datetime.datetime):
            since = since.timestamp()
        params: dict[str, Any] = {"limit": limit}
        given = {"user": user, "action": action, "since": since, "team": team, "before": before}
        params.update({key: value for key, value in given.items() if value is not None})
        return _parse(AuditPage, self._request("GET", f"{API_PREFIX}/audit", params=params))

    def audit(
        self,
        *,
        user: str | None = None,
        action: str | None = None,
        since: float | datetime.datetime | None = None,
        team: str | None = None,
        limit: int | None = 100,
        page_size: int = 100,
    ) -> Iterator[AuditRecord]:
        """The newest ``limit`` audit records that match (None: all), newest first, fetched
        a page at a time: of every team for an administrator, of its teams for a
        team-admin (others get Forbidden). ``action``: that action or those under it
        (``job``: ``job.submit``, ``job.stop``, ...)."""
        before: int | None = None
        left = limit
        while left is None or left > 0:
            size = page_size if left is None else min(page_size, left)
            page = self.audit_page(
                user=user, action=action, since=since, team=team, limit=size, before=before
            )
            yield from page.records
            if left is not None:
                left -= len(page.records)
            if page.next_before is None:
                return
            before = page.next_before

    # -- logs and following ---------------------------------------------------

    def read_log(
        self, job_id: str, role: str, index: int, start: int = 0, end: int | None = None
    ) -> bytes:
        """Bytes ``start``..``end`` of a task's log (to its current end if ``end`` is None)."""
        return self._read_range(self._log(job_id, role, index), start, end)

    def log_size(self, job_id: str, role: str, index: int) -> int:
        """How many bytes a task's log holds now (less than read once the output passed the
        log's cap: the log was cut back to its head, the tail follows when the task ends)."""
        response = self._request("GET", self._log(job_id, role, index), params={"end": 0})
        return int(response.headers.get("X-Log-Size", 0))

    def read_setup_log(self, job_id: str) -> bytes:
        """The job's ``setup`` phase: the output of its Python environments' builds."""
        return self._read_range(f"{self._job(job_id)}/setup/log", 0, None)

    def job_outputs(self, job_id: str) -> list[OutputFile]:
        """The files the job's tasks left in its output folder (``$TRAINFLEET_OUTPUT_DIR``),
        by name."""
        return _parse(list[OutputFile], self._request("GET", f"{self._job(job_id)}/outputs"))

    def job_output(self, job_id: str, name: str) -> bytes:
        """The bytes of the job's output ``name``: NotFound (naming its outputs) where it
        has none of that name, BadRequest for a name that is no plain file name."""
        path = f"{self._job(job_id)}/outputs/{_segment(name)}"
        return self._request("GET", path).content

    def _read_range(self, path: str, start: int, end: int | None) -> bytes:
        data = bytearray()
        while True:
            params = {"start": start + len(data)} | ({} if end is None else {"end": end})
            response = self._request("GET", path, params=params)
            data += response.content
            reached = int(response.headers.get("X-Log-End", start + len(data)))
            limit = int(response.headers.get("X-Log-Size", 0)) if end is None else end
            if not response.content or reached >= limit:
                return bytes(data)

    def follow_log(self, job_id: str, role: str, index: int, start: int = 0) -> Iterator[str]:
        """A task's log from byte ``start``, piece by piece (complete lines), until the job ends."""
        for event in self._follow(f"{self._log(job_id, role, index)}/follow", {"start": start}):
            if event.event == "log":
                yield LogChunk.model_validate_json(event.data).text

    def follow_events(self, job_id: str, after: int = 0) -> Iterator[EventRecord]:
        """A job's events with an id above ``after``, as they happen, until the job ends."""
        for event in self._follow(f"{self._job(job_id)}/events/follow", {"after": after}):
            if event.event == "event":
                yield _parse(EventRecord, event.data)

    def follow_changes(self, after: int | None = None) -> Iterator[EventRecord | FeedNotice]:
        """Every job and task change the caller may see, as it happens, from now (or after
        the event id ``after``): EventRecords (a job's deletion has the code ``deleted``),
        and FeedNotices about the stream (events lost, read again; the server's store
        unavailable, and back). Never ends by itself; resumes after the last event where
        the connection drops."""
        params = {} if after is None else {"after": after}
        for event in self._follow(f"{API_PREFIX}/events/follow", params):
            if event.event == "change":
                yield _parse(EventRecord, event.data)
            elif event.event == "notice":
                yield _parse(FeedNotice, event.data)

    def wait(self, job_id: str) -> JobRecord:
        """Block until the job has ended; returns it."""
        for _ in self.follow_events(job_id, after=2**62):
            pass
        return self.get(job_id)

    def run(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        workers: int = 1,
        framework: str = "pytorch",
        workdir: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> Any:
        """Call ``fn(*args)`` in ``workers`` tasks of a job on the server, with
        ``framework``'s variables set in each (``pytorch``: ``init_process_group`` works as
        it is), and return rank 0's result; the tasks' logs are printed as they come, each
        line prefixed ``worker/N``; Ctrl-C cancels the job. The function goes pickled with
        cloudpickle (by value where it is ``__main__``'s or a module of ``workdir``), with
        ``workdir`` (default: the current folder) as the job's directory.

        ``options``: ``resources``, ``environment`` (built with uv; its Python is this
        one's), ``queue``, ``name``, ``env``, ``image``, ``restart``, ``labels``, and
        ``kwargs`` for ``fn``. Raises Unpicklable (naming the object) before anything is
        sent, and RemoteError with the remote type, message and traceback where ``fn``
        raised.
        """
        from trainfleet.functions.call import call
        from trainfleet.functions.job import RunOptions

        chosen, kwargs = RunOptions.split(workers=workers, framework=framework, **options)
        return call(_ServerHost(self), fn, args, kwargs, chosen, workdir)

    def _follow(self, path: str, params: dict[str, int]) -> Iterator[ServerSentEvent]:
        """The stream's events up to its ``end``, resuming where it stopped if it drops."""
        last_id: str | None = None
        tries = 0
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            timeout = httpx.Timeout(self.timeout, read=max(self.timeout, 60.0))
            try:
                with connect_sse(
                    self._http, "GET", path, params=params, headers=headers, timeout=timeout
                ) as source:
                    _raise_for_status(source.response)
                    for event in source.iter_sse():
                        if event.event == "end":
                            return
                        if event.event == "error":
                            raise _error(404, event.data)
                        last_id = event.id or last_id
                        tries = 0
                        yield event
                problem = "the stream ended before the job did"
            except httpx.TransportError as error:
                if _verification_failure(error) is not None:
                    raise self._unreachable(error) from None  # the same again: no retry
                problem = str(error) or type(error).__name__
            tries += 1
            if tries > RECONNECTS:
                raise Unreachable(f"lost the server at {self.url}: {problem}")
            time.sleep(0.2 * tries)

    # -- plumbing -------------------------------------------------------------

    def _team(self, name: str) -> str:
        return f"{API_PREFIX}/teams/{_segment(name)}"

    def _queue(self, name: str) -> str:
        return f"{API_PREFIX}/queues/{_segment(name)}"

    def _workflow(self, team: str, name: str) -> str:
        return f"{API_PREFIX}/workflows/{_segment(team)}/{_segment(name)}"

    def _run(self, run_id: str) -> str:
        return f"{API_PREFIX}/workflow-runs/{_segment(run_id)}"

    def _job(self, job_id: str) -> str:
        return f"{API_PREFIX}/jobs/{_segment(job_id)}"

    def _log(self, job_id: str, role: str, index: int) -> str:
        return f"{self._job(job_id)}/tasks/{_segment(role)}/{int(index)}/log"

    def service_answers(self, path: str) -> bool:
        """Whether the job's service at ``path`` (a ``ServiceLink``'s) answers through the
        server's proxy: not yet (503) while it starts."""
        try:
            response = self._http.get(path, follow_redirects=False)
        except httpx.TransportError as error:
            raise self._unreachable(error) from None
        if response.status_code != 503:
            _raise_for_status(response)
        return response.status_code != 503

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise self._unreachable(error) from None
        _raise_for_status(response)
        return response

    def _request_again_while_lost(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """``_request``, sent again (``SUBMIT_TRIES`` in all, with growing pauses) while its
        answer is lost: only for a request that is safe to send twice (its key says so)."""
        import tenacity

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(_answer_lost),
            stop=tenacity.stop_after_attempt(SUBMIT_TRIES),
            wait=tenacity.wait_exponential_jitter(multiplier=0.5, max=4),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    response = self._http.request(method, path, **kwargs)
                    _raise_for_status(response)
        except httpx.TransportError as error:
            raise self._unreachable(error) from None
        return response

    def _unreachable(self, error: httpx.TransportError) -> Unreachable:
        """What a failed connection says: Untrusted for a certificate that failed."""
        failure = _verification_failure(error)
        if failure is not None:
            reason = failure.verify_message or _ssl_words(failure)
            return Untrusted(self.url, reason.rstrip("."))
        return Unreachable(f"cannot reach the server at {self.url}: {error}")


class ServerTail(LogTail):
    """A ``LogTail`` that reads a task's log from the server by byte range; ``call`` makes
    each request (the CLI's says the server's refusals its own way).

    The log's size takes a request, so it is asked only before the first read, after a
    read that filled its limit (the view may be behind: see ``LogFollower``) and after
    one that found nothing (the log may have been cut back).
    """

    def __init__(
        self,
        client: Client,
        job_id: str,
        role: str,
        index: int,
        call: Callable[[Callable[[], Any]], Any] = lambda request: request(),
    ) -> None:
        super().__init__(Path(f"{job_id}/{role}-{index}.log"))
        self.client, self.call, self.task = client, call, (job_id, role, index)
        self._filled = True  # the last read took all it asked for (or none was made)

    def _read(self, limit: int = CHUNK) -> bytes:
        start = self.offset
        data = self._range(start, start + limit)
        self._filled = len(data) == limit
        if not data and start and (size := self._size()) < start:  # cut back at its cap:
            self.offset, self._partial = size, b""  # go on from its new end
        return data

    def pending(self) -> int:
        return super().pending() if self._filled else len(self._partial)

    def _size(self) -> int:
        size: int = self.call(lambda: self.client.log_size(*self.task))
        return size

    def _range(self, start: int, end: int) -> bytes:
        data: bytes = self.call(lambda: self.client.read_log(*self.task, start, end))
        return data


class _ServerHost:
    """A function's job on the server a client talks to (``functions.call``)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._ended: dict[str, threading.Event] = {}

    def submit_call(self, spec: JobSpec, folder: Path, payload: bytes) -> str:
        from trainfleet.spec.functions import PAYLOAD

        tree = self.client.upload_workdir(folder, extra={PAYLOAD: payload})
        return self.client._submit(spec, tree).id

    def tasks(self, job_id: str) -> list[TaskRecord]:
        return self.client.describe(job_id).tasks

    def log_tail(self, job_id: str, role: str, index: int) -> LogTail:
        return ServerTail(self.client, job_id, role, index)

    def wait(self, job_id: str, timeout: float) -> bool:
        """Whether the job ended within ``timeout``: one stream of its events tells (a
        thread follows it), rather than a request per look."""
        ended = self._ended.get(job_id)
        if ended is None:
            ended = self._ended[job_id] = threading.Event()

            def follow() -> None:
                try:
                    self.client.wait(job_id)
                finally:  # ended, or the stream failed: the caller looks itself
                    ended.set()

            threading.Thread(target=follow, name=f"wait-{job_id}", daemon=True).start()
        return ended.wait(timeout) and State(self.get(job_id).state).is_final

    def get(self, job_id: str) -> JobRecord:
        return self.client.get(job_id)

    def interrupt(self, job_id: str) -> None:
        self.client.cancel(job_id)

    def output_names(self, job_id: str) -> list[str]:
        return [found.name for found in self.client.job_outputs(job_id)]

    def output(self, job_id: str, name: str) -> bytes:
        return self.client.job_output(job_id, name)


def trusting(ca_cert: str | os.PathLike[str]) -> ssl.SSLContext:
    """A client context that trusts the CA certificate(s) in ``ca_cert`` (PEM) only;
    BadInput when the file cannot be read or holds no certificate."""
    path = os.fspath(ca_cert)
    try:
        return ssl.create_default_context(cafile=path)
    except ssl.SSLError as error:
        reason = _ssl_words(error)
    except OSError as error:
        reason = error.strerror or str(error)
    raise errors.BadInput(f"cannot load the CA certificate {path}: {reason}")


def _verification_failure(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate check that failed under a transport error, if that is what it is."""
    seen: BaseException | None = error
    for _ in range(8):  # httpx's error, httpcore's, then ssl's
        if seen is None or isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _ssl_words(error: ssl.SSLError) -> str:
    """OpenSSL's words, without the ``(_ssl.c:1234)`` of where CPython met them."""
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(error))


def _segment(value: str) -> str:
    """``value`` as one path segment: ``../x`` stays one segment, which the server refuses,
    and so does ``..`` (its dots escaped: no client resolves it as the folder above)."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if value in (".", "..") else quoted


def _answer_lost(error: BaseException) -> bool:
    """Whether a request may have reached the server and its answer not come back: the
    connection broke or timed out after it was made, or a proxy (or the server, 503)
    answered for it. A refused connection is no such case: no server listens."""
    lost = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ReadTimeout)
    if isinstance(error, lost):
        return True
    return isinstance(error, ServerError) and error.status in GATEWAY_ERRORS


def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    response.read()
    raise _error(response.status_code, response.text)


def _error(status: int, text: str) -> ClientError:
    try:
        body = ErrorBody.model_validate_json(text)
        message, problems = body.detail, body.problems
    except ValidationError:
        message, problems = text.strip() or f"HTTP {status}", []
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ClientError)
    return kind(message, status, problems)


def _parse(kind: type[T], data: httpx.Response | str) -> T:
    """A model or record from an answer's JSON body (or one event's data)."""
    adapter = _ADAPTERS.get(kind) or _ADAPTERS.setdefault(kind, TypeAdapter(kind))
    parsed: T = adapter.validate_json(data.content if isinstance(data, httpx.Response) else data)
    return parsed
