"""Jobs: submit, find, read, stop and delete them, read their events, logs and outputs, each
call checked against the caller (``access.RULES``; which team owns a job: ``ownership``).

A job's logs and outputs are read as the job is: ``readable`` finds it for the caller
(READ_JOB), then ``task_log`` or ``outputs``/``open_output`` (``JobReads``) take it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainfleet.control import local_stop
from trainfleet.control.access import Action, Caller
from trainfleet.control.services.links import service_links, service_path
from trainfleet.control.services.ownership import QueueTeams, allowed_job
from trainfleet.control.services.reads import JobReads
from trainfleet.domain.errors import Conflict, NotFound, Unauthorized
from trainfleet.domain.links import ServiceLink
from trainfleet.domain.records import JobPage, JobRecord, State
from trainfleet.spec.notebook import ROLE as NOTEBOOK
from trainfleet.vault.service_tokens import is_workdir_token, notebook_token
from trainfleet.workdirs.store import TREE_MARKER

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine
    from trainfleet.spec.models import JobSpec


def submission_key(caller: Caller, key: str | None) -> str | None:
    """What a job is stored with for the ``Idempotency-Key`` its submitter sent (None:
    none): the key is the submitter's own, so two users' same key never meet."""
    if key is None:
        return None
    return hashlib.sha256(f"{caller.user}\0{key}".encode()).hexdigest()


@dataclass(frozen=True)
class ServiceDoor:
    """What the proxy needs to open one service of a job (``Jobs.service``)."""

    link: ServiceLink | None
    job_ended: bool
    owned: bool
    """Whether the caller is the job's owner (its pages may act in the caller's name)."""
    token: str = field(default="", repr=False)


class Jobs(JobReads):
    """The jobs ``engine`` keeps and runs, as callers may see and change them."""

    def __init__(self, engine: Engine, owners: QueueTeams, local_runners: bool = False) -> None:
        """``local_runners``: a job another process of this machine runs (``trainfleet
        run``) is stopped by asking that process (``trainfleet ui``'s data directory)."""
        super().__init__(engine.store, engine.data_dir)
        self.engine = engine
        self.owners = owners
        self.local_runners = local_runners

    def get(self, job_id: str) -> JobRecord:
        """The job, as the engine has it; JobNotFound if there is none."""
        return self.engine.get(job_id)

    def service(self, caller: Caller, job_id: str, path: str, action: Action) -> ServiceDoor:
        """The job's service served at ``path`` (a ``ServiceLink``'s) as the proxy opens it
        to a caller who may do ``action`` to the job (NotFound, Forbidden otherwise): its
        link (None: the job has no such service), whether the job has ended, whether the
        caller owns it, and the token the service wants (a notebook's Jupyter; "": none)."""
        job = self.readable(caller, job_id, action)
        links = service_links(job, self.tasks(job_id))
        link = next((link for link in links if link.path == path), None)
        notebook = link is not None and path == service_path(job_id, NOTEBOOK)
        token = notebook_token(self.engine.data_dir.root, job_id) if notebook else ""
        return ServiceDoor(link, State(job.state).is_final, job.user == caller.user, token)

    def readable(self, caller: Caller, job_id: str, action: Action = Action.READ_JOB) -> JobRecord:
        """The job, if the caller may do ``action`` to it: NotFound where it cannot see it
        (as for a job that does not exist), Forbidden where it sees it but may not."""
        return allowed_job(caller, self.get(job_id), action)

    def find(
        self,
        caller: Caller,
        *,
        state: str | None = None,
        name: str | None = None,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        team: str | None = None,
        queue: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        """Jobs of the caller's teams (every job, for an administrator), newest first;
        ``team``: of that team only (none where the caller does not see it, as for a team
        that does not exist)."""
        teams = caller.teams_seen()
        if team is not None:
            teams = [team] if teams is None or team in teams else []
        return self.page(
            state=state,
            name=name,
            user=user,
            labels=labels,
            teams=teams,
            queue=queue,
            limit=limit,
            cursor=cursor,
        )

    def team_of_queue(self, queue: str) -> str:
        """The team that owns the queue ``queue``."""
        return self.owners.team_of(queue)

    def placed(self, caller: Caller, spec: JobSpec) -> tuple[JobSpec, str]:
        """The job as it will wait, and its team, if the caller may submit it there (see
        ``QueueTeams.for_submission``)."""
        return self.owners.for_submission(caller, spec)

    def submit(
        self,
        caller: Caller,
        spec: JobSpec,
        team: str,
        workdir: Path | None,
        source: str,
        fill_workdir: Callable[[Path], None] | None = None,
        key: str | None = None,
    ) -> JobRecord:
        """Store a job ``placed`` in ``team``, and queue it for admission at once (see
        ``Engine.submit`` for ``workdir`` and ``fill_workdir``). ``key``: the
        ``Idempotency-Key`` the caller sent it with: where the caller stored a job with the
        same key before, that job is the answer (see ``submission_key``)."""
        return self.engine.submit(
            spec,
            workdir,
            source,
            user=caller.user,
            start=True,
            fill_workdir=fill_workdir,
            team=team,
            key=submission_key(caller, key),
        )

    def submit_soon(
        self,
        caller: Caller,
        spec: JobSpec,
        team: str,
        workdir: Path | None,
        source: str,
        key: str | None = None,
    ) -> Future[JobRecord]:
        """``submit`` without a folder to fill, for a caller that waits on the future."""
        return self.engine.submit_soon(
            spec, workdir, source, user=caller.user, team=team, key=submission_key(caller, key)
        )

    def cancel(self, caller: Caller, job: JobRecord) -> JobRecord:
        """Stop ``job``, if the caller may; an ended job stays as it is."""
        allowed_job(caller, job, Action.STOP_JOB)
        reason = f"cancelled by {caller.user}"
        if self.local_runners:
            return local_stop.stop(self.engine, job.id, reason)
        self.engine.cancel(job.id, reason)
        return self.get(job.id)

    def delete(self, caller: Caller, job: JobRecord, force: bool = False) -> None:
        """Forget ``job`` (ended; ``force`` stops it first) and its logs, if the caller may."""
        allowed_job(caller, job, Action.DELETE_JOB)
        self.engine.delete(job.id, force=force)

    def tree_for_pods(self, job_id: str, token: str) -> str | None:
        """The stored tree (``<owner>/<digest>``) that job ``job_id``'s folder is a copy
        of, for its Pods (``token``: the job's ``workdir_token``); None where the folder
        came from none (it starts empty). Unauthorized for another token; Conflict once the
        job has ended."""
        if not is_workdir_token(self.engine.data_dir.root, job_id, token):
            raise Unauthorized(f"not a token of job {job_id}'s folder")
        job = self.get(job_id)
        if State(job.state).is_final:
            raise Conflict(f"job {job_id} has ended ({job.state}): its folder is not sent")
        marker = self.data_dir.job_dir(job_id) / TREE_MARKER
        return marker.read_text() if marker.is_file() else None

    def trees_in_use(self) -> Iterator[str]:
        """The stored trees (``owner/digest``) that kept jobs run in copies of."""
        jobs = self.data_dir.root / "jobs"
        return (marker.read_text() for marker in jobs.glob(f"*/{TREE_MARKER}"))

    def task_log(self, job: JobRecord, role: str, index: int) -> Path:
        """Where the task's log is; NotFound naming the job's tasks where it has no such one."""
        tasks = self.tasks(job.id)
        if not any(task.role == role and task.index == index for task in tasks):
            names = ", ".join(task.name for task in tasks)
            raise NotFound(f"job {job.id} has no task {role}/{index} (tasks: {names})")
        return self.engine.log_path(job.id, role, index)
