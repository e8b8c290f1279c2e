"""The service functions every face calls: submit, run, list, describe, cancel, logs.

``trainfleet run`` without a server embeds this engine in its own process.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from trainfleet.backends.api import Address, Backend, Preview
from trainfleet.backends.gpu_readings import GpuReader
from trainfleet.backends.launch import JobLaunch, ServerAccess
from trainfleet.backends.local.firewall import Firewall, FirewallError
from trainfleet.control import notebook_tokens, queueing
from trainfleet.control.admitter import Admitter
from trainfleet.control.controller import COUNTED_CODES, COUNTED_STATES, JobController, Stored
from trainfleet.control.gpu_health import GpuHealth
from trainfleet.control.runner import Runner
from trainfleet.control.submissions import NewJob, SubmissionWriter
from trainfleet.datadir.checkpoints import committed_steps
from trainfleet.datadir.layout import DataDir
from trainfleet.datadir.space import require_free
from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.errors import BadInput
from trainfleet.domain.records import (
    EventRecord,
    JobActive,
    JobDetails,
    JobNotFound,
    JobRecord,
    Reason,
    State,
    TaskRecord,
)
from trainfleet.environments.cache import Builders, EnvironmentCache
from trainfleet.environments.task_base import SERVERS, TaskBase
from trainfleet.scheduling.admission import Admission, GangJob, Scheduler
from trainfleet.scheduling.cluster import TaskAllocation
from trainfleet.scheduling.gpu_memory import sized_by_memory
from trainfleet.scheduling.placement import (
    Placement,
    TaskKey,
    TaskSlot,
    assign_gpus,
    task_keys,
)
from trainfleet.spec.errors import SpecError
from trainfleet.spec.functions import python_problem
from trainfleet.spec.models import JobSpec, Resources
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreConflict

if TYPE_CHECKING:
    from trainfleet.backends.accounts import TeamAccounts
    from trainfleet.spec.queues import QueueConfig
    from trainfleet.vault.secrets import Secrets

ID_TRIES = 5
PASS_SECONDS = 2.0
"""Seconds ``admit_beside`` waits for a pass to admit a job that fits, at most."""
ADMIT_SECONDS = 30.0
"""Seconds ``admit_beside`` waits for an admitted job to start, at most."""
WAITING = "waiting to be admitted"


class Engine:
    """Jobs stored under one data directory and run on one backend."""

    def __init__(
        self,
        data_dir: DataDir,
        store: Store,
        backend: Backend,
        environments: EnvironmentCache,
        *,
        supervised: bool = False,
        task_base: TaskBase = SERVERS,
        secrets: Secrets | None = None,
        team_accounts: TeamAccounts | None = None,
        firewall: Firewall | None = None,
    ) -> None:
        """The engine of parts made by ``control.assembly`` (``build_engine``).

        ``supervised`` (a server): tasks outlive this process and ``resume`` adopts them.
        ``task_base``: where tasks' environments start: a server's small base by default,
        the user's own environment for their own runs (``USERS_OWN``).
        """
        self.data_dir = data_dir
        self.store = store
        self.backend = backend
        self.environments = environments
        self.supervised = supervised
        self.task_base = task_base
        self.secrets = secrets
        """Teams' secrets, where a server keeps them (an embedded engine has none)."""
        self.team_accounts = team_accounts
        """Where each team's tasks run as its own Unix account (``--isolate-teams``)."""
        self.firewall = firewall
        """Keeps other accounts off each job's ports on this machine (with team accounts)."""
        self.server_access: ServerAccess | None = None
        """Where a server's notebooks reach it (set by ``assembly.server_engine``): each
        gets it with a token of its owner (``notebook_tokens``). None: an embedded engine's,
        whose notebooks get no token."""
        self.gpu_health = GpuHealth(
            data_dir.root, backend if isinstance(backend, GpuReader) else None
        )
        """The health of the GPUs the backend hands out itself (this machine's)."""
        self.runner = Runner(self.controller, on_end=self._ended, on_broken=self._broken)
        self._queues = _stored_queues(self.store)
        self._admitter: Admitter | None = None
        self._admitter_built = threading.Lock()
        self._left_read = threading.Event()
        """Clear between ``expect_resume`` and the resume's reading of the stored jobs."""
        self._left_read.set()
        self.submissions = SubmissionWriter(
            self.store,
            lambda stored: self._queue((new.job, new.spec) for new in stored),
            before=self._left_read.wait,
        )
        """Stores ``submit_soon``'s jobs, many per transaction (its thread starts then)."""

    @property
    def admitter(self) -> Admitter:
        """Admission, built on first use: reading stored jobs (``list``, ``logs``) needs
        neither the backend's nodes (``sinfo`` on Slurm, which may be down) nor a thread."""
        with self._admitter_built:
            if self._admitter is None:
                scheduler = Scheduler(
                    self.backend.nodes(),
                    [queueing.queue_spec(config) for config in self._queues.values()],
                )
                self._admitter = Admitter(
                    scheduler,
                    launch=self._launch,
                    preempt=lambda preemption: self.runner.preempt(
                        preemption.job, preemption.reason
                    ),
                    note_waiting=lambda job_id, why: self.store.note(
                        job_id, State.QUEUED, why, waiting=True, event=False
                    ),
                    before_pass=self._cordon_unhealthy,
                )
            return self._admitter

    def _cordon_unhealthy(self, scheduler: Scheduler) -> None:
        """Keep new tasks off the GPUs that are unhealthy now (before each pass)."""
        unhealthy = self.gpu_health.unhealthy()
        for node in scheduler.cluster.nodes:
            if node.devices:
                cordoned = [n for n, host in enumerate(node.devices) if host in unhealthy]
                scheduler.cluster.cordon(node.name, cordoned)

    def clear_gpu(self, index: int, by: str = "") -> None:
        """An operator's word that GPU ``index`` is well: its present problems are ignored
        and waiting jobs are looked at again. NotFound where there is no such GPU."""
        self.gpu_health.clear(index, by)
        if self._admitter is not None:
            self._admitter.wake()

    @property
    def scheduler(self) -> Scheduler:
        return self.admitter.scheduler

    def plan(self, spec: JobSpec) -> Placement:
        """Place every task: free ports, exclusive GPUs of this machine (a cluster engine
        gives its own GPUs where it places the tasks). Raises Unschedulable."""
        wants_gpus = any(role.resources.gpu for role in spec.roles.values())
        gpus = {}
        if wants_gpus and not self.backend.queues_tasks:  # else the engine's nodes decide
            gpus = assign_gpus(spec, self.backend.nodes()[0].devices)  # this machine's
        owner = f"plan-{secrets.token_hex(4)}"  # shown, never run: held only for the moment
        try:
            addresses = self.backend.reserve(owner, spec)
        finally:
            self.backend.release(owner)
        return Placement(
            tuple(
                TaskSlot(*key, addresses[key].host, addresses[key].port, gpus.get(key, ()))
                for key in task_keys(spec)
            )
        )

    def submit(
        self,
        spec: JobSpec,
        workdir: Path | None,
        source: str = "trainfleet",
        user: str | None = None,
        start: bool = False,
        fill_workdir: Callable[[Path], None] | None = None,
        team: str = "default",
        key: str | None = None,
    ) -> JobRecord:
        """Store the job, queued, and with ``start`` queue it for admission here at once.

        ``workdir``: where it runs; None: in an empty folder of its own (``jobs/<id>/
        workdir``, gone with the job), made when it starts. ``fill_workdir``: in that
        folder, which this fills before the job is stored. ``key``: its submission key:
        where a job was stored with it, that job is returned instead (BadInput where its
        spec differs).
        Raises Unschedulable when it could never be admitted, DiskFull when the data
        directory's disk has no room for it.
        """
        spec = self._admissible(spec, workdir, team)
        self._left_read.wait()
        for _ in range(ID_TRIES):
            job_id = f"{spec.name}-{secrets.token_hex(4)}"
            own = self.data_dir.job_dir(job_id) / "workdir"
            if fill_workdir is not None and own.parent.exists():  # an id taken: draw again
                continue
            try:
                if fill_workdir is not None:
                    fill_workdir(own)
                runs_in = workdir if workdir is not None and fill_workdir is None else own
                job, tasks = self._records(job_id, spec, runs_in, source, user, team)
                self.store.add_job(job, tasks, key)
            except BaseException as error:
                if fill_workdir is not None:  # nothing half-stored (the folder was new)
                    shutil.rmtree(own.parent, ignore_errors=True)
                if isinstance(error, StoreConflict):
                    if key is not None and (first := self._stored_with(key, spec)) is not None:
                        return first
                    continue  # the id was taken: draw again
                raise
            if start:
                self._queue([(job, spec)])
            return job
        raise StoreConflict(f"no free job id for {spec.name!r} after {ID_TRIES} tries")

    def submit_soon(
        self,
        spec: JobSpec,
        workdir: Path | None,
        source: str = "trainfleet",
        user: str | None = None,
        team: str = "default",
        key: str | None = None,
    ) -> Future[JobRecord]:
        """``submit(..., start=True)`` for a caller that waits on a future, not on the store
        (the API's event loop): the checks here, then the job stored with the others queued
        meanwhile (``SubmissionWriter``: one transaction for a burst) and queued for
        admission. The future is the stored job, or why it could not be stored."""
        spec = self._admissible(spec, workdir, team)
        answer: Future[JobRecord] = Future()
        self._store_soon(answer, spec, workdir, source, user, team, key, ID_TRIES)
        return answer

    def _store_soon(
        self,
        answer: Future[JobRecord],
        spec: JobSpec,
        workdir: Path | None,
        source: str,
        user: str | None,
        team: str,
        key: str | None,
        tries: int,
    ) -> None:
        job_id = f"{spec.name}-{secrets.token_hex(4)}"
        runs_in = workdir if workdir is not None else self.data_dir.job_dir(job_id) / "workdir"
        job, tasks = self._records(job_id, spec, runs_in, source, user, team)

        def stored(new: Future[JobRecord]) -> None:
            error = new.exception()
            try:
                first = self._stored_with(key, spec) if isinstance(error, StoreConflict) else None
            except Exception as why:  # another job's key, the store away
                answer.set_exception(why)
                return
            if first is not None:
                answer.set_result(first)
            elif isinstance(error, StoreConflict) and tries > 1:  # the id was taken: again
                self._store_soon(answer, spec, workdir, source, user, team, key, tries - 1)
            elif error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(new.result())

        self.submissions.add(NewJob(job, tasks, spec, key)).add_done_callback(stored)

    def _stored_with(self, key: str | None, spec: JobSpec) -> JobRecord | None:
        """The job stored before with submission key ``key``, if any; BadInput where it
        was another job (its spec differs): a key is for sending one job again."""
        first = self.store.job_with_key(key) if key is not None else None
        if first is not None and first.spec != spec.model_dump_json():
            raise BadInput(
                f"Idempotency-Key: this key was sent with another job ({first.id}); send a"
                " new key with each new job"
            )
        return first

    def _admissible(self, spec: JobSpec, workdir: Path | None, team: str) -> JobSpec:
        """``spec`` as it will wait, if it can be stored: Unschedulable, DiskFull, BadInput
        or SpecError where not (see ``submit``)."""
        require_free(self.data_dir.root)
        if (problem := python_problem(spec)) is not None:
            raise BadInput(problem)
        self._check_secrets(spec, team)
        self._check_checkpoint_folder(spec, workdir, team)
        spec = sized_by_memory(spec, self.backend.gpu_memory)
        self.backend.check(spec)
        self.scheduler.check(queueing.gang_job(spec.name, spec, time.time()))
        return spec

    def _check_secrets(self, spec: JobSpec, team: str) -> None:
        """SpecError naming each secret the job names that its team does not have."""
        refs = spec.secret_refs()
        if refs and self.secrets is None:
            field = refs[0][0]
            raise SpecError.one(
                "secrets are kept by a server: submit the job to one (trainfleet secret create)",
                field=field,
            )
        if self.secrets is not None:
            self.secrets.check(team, spec)

    def _check_checkpoint_folder(self, spec: JobSpec, workdir: Path | None, team: str) -> None:
        """SpecError where a job that has not ended writes to the folder this one names,
        unless both say ``checkpoint.shared`` (two writers of one folder overwrite each
        other's steps); another team's job is not named (its id is not ``team``'s to see)."""
        named = spec.checkpoint_path
        if named is None or (
            workdir is None and "://" not in named and not Path(named).is_absolute()
        ):
            return  # its own folder
        mine = self.data_dir.checkpoints_of("", workdir or Path("/"), named)
        for state in (state for state in State if not state.is_final):
            for other in self.store.find_jobs(state=state.value, limit=100_000).jobs:
                theirs = json.loads(other.spec).get("checkpoint") or {}
                path = theirs.get("path")
                if path is None or self.data_dir.checkpoints_of("", other.workdir, path) != mine:
                    continue
                if not (spec.checkpoint.shared and theirs.get("shared")):
                    job = f"job {other.id}" if other.team == team else "another team's job"
                    raise SpecError.one(
                        f"{mine} is the checkpoint folder of {job}, which has not "
                        "ended: name another, or set checkpoint.shared: true on both",
                        field="checkpoint.path",
                    )

    def _records(
        self,
        job_id: str,
        spec: JobSpec,
        workdir: Path,
        source: str,
        user: str | None,
        team: str,
    ) -> tuple[JobRecord, list[TaskRecord]]:
        """A new job's records as stored, queued."""
        job = JobRecord(
            id=job_id,
            name=spec.name,
            framework=spec.framework.value,
            spec=spec.model_dump_json(),
            source=source,
            workdir=str(workdir),
            user=_user() if user is None else user,
            team=team,
            queue=spec.queue,
            labels=dict(spec.labels),
            created_at=time.time(),
            code=Code.SUBMITTED,
            waiting_code=Code.WAITING_FOR_ADMISSION,
            waiting=WAITING,
        )
        tasks = [
            TaskRecord(job_id=job.id, role=role, index=index, code=Code.SUBMITTED)
            for role, index in task_keys(spec)
        ]
        return job, tasks

    def controller(self, job_id: str) -> JobController:
        """The controller that runs a stored job."""
        job = self.get(job_id)
        return self._controller_of(job, JobSpec.model_validate_json(job.spec))

    def _controller_of(
        self,
        job: JobRecord,
        spec: JobSpec,
        stored: Stored | None = None,
        placement: Placement | None = None,
    ) -> JobController:
        """The controller of ``job`` (its ``spec`` parsed); ``stored``: the job's tasks as
        read just now, which it reads no more; ``placement``: where its tasks run, where
        the caller has just decided it."""
        if placement is None:
            tasks = stored.tasks if stored is not None else self.store.list_tasks(job.id)
            placement = Placement(tuple(_slot(task) for task in tasks))
        server = self.server_access if spec.notebook is not None else None
        return JobController(
            job.id,
            spec,
            placement,
            Path(job.workdir),
            self.store,
            self.backend,
            self.data_dir,
            self.task_base,
            self.environments,
            self.secrets.values(job.team, spec) if self.secrets is not None else {},
            self.team_accounts.of(job.team) if self.team_accounts is not None else None,
            job.team,
            self._builders(job.team),
            self.gpu_health.unhealthy if self.gpu_health.reader is not None else None,
            server=server,
            owner=job.user,
            stored=stored,
            first_run=job.started_at is None,
            readdress=partial(self._readdress, job, spec),
        )

    def _builders(self, team: str) -> Builders | None:
        """Who builds the team's environments where tasks run as their team's account."""
        if self.team_accounts is None:
            return None
        return Builders(self.team_accounts.of(team), self.team_accounts.builder())

    def _broken(self, job_id: str, error: Exception) -> None:
        """No controller could be made for an admitted job: it fails, saying why."""
        self._end_unstarted(job_id, State.FAILED, Reason.INTERNAL_ERROR.condition(error))

    def dry_run(self, spec: JobSpec, workdir: Path) -> Preview:
        """What ``run`` would start, without storing or starting anything.

        Raises Unschedulable for a job the backend can never run."""
        spec = sized_by_memory(spec, self.backend.gpu_memory)
        self.backend.check(spec)
        placement = self.plan(spec)
        attempts = {slot.key: 0 for slot in placement}
        job = JobLaunch(
            f"{spec.name}-dryrun", spec, placement, workdir, self.data_dir, attempts, self.task_base
        )
        return self.backend.dryrun(job)

    def start(self, job_id: str) -> None:
        """Queue a stored job for admission; it runs on a background thread once admitted."""
        job = self.get(job_id)
        self._queue([(job, JobSpec.model_validate_json(job.spec))])

    def admit_beside(self, job_id: str, others: Sequence[JobRecord]) -> Condition | None:
        """Queue a stored job here if it fits beside ``others`` (jobs that other processes
        run on this machine, holding what they were given), and wait until it has started.

        None then (or once it ended), else why it waits (it is not queued then).
        The caller holds the machine's admission lock (``local_admission``).
        """
        job = self.get(job_id)
        spec = JobSpec.model_validate_json(job.spec)
        gang = queueing.gang_job(job.id, spec, job.created_at)
        cluster = self.scheduler.cluster
        try:
            with self.admitter.lock:
                tasks = self.store.tasks_of([other.id for other in others])
                for other in others:
                    held = queueing.gang_job(
                        other.id, JobSpec.model_validate_json(other.spec), other.created_at
                    )
                    allocations = self._allocations(other.id, held, tasks.get(other.id, []))
                    self.scheduler.adopt(held, allocations)
                if State(self.get(job_id).state).is_final:  # cancelled meanwhile
                    return None
                if cluster.place(job_id, gang.tasks) is None:
                    lacks = _held_elsewhere(gang.total.shortfall(cluster.free), others)
                    return Condition(Code.WAITING_FOR_RESOURCES, lacks)
                cluster.release(job_id)
                self._queue([(job, spec)])
            self.admitter.wait(lambda: job_id not in self.scheduler.pending(), PASS_SECONDS)
            deadline = time.monotonic() + ADMIT_SECONDS
            while self.get(job_id).state == State.QUEUED and time.monotonic() < deadline:
                with self.admitter.lock:
                    if job_id in self.scheduler.pending():  # held back here (a quota)
                        why = self.scheduler.waiting(job_id)
                        self.admitter.withdraw(job_id)
                        return why or Condition(Code.WAITING_FOR_ADMISSION, "waiting")
                time.sleep(0.005)
            return None
        finally:
            self._let_go(others)

    def _let_go(self, others: Sequence[JobRecord]) -> None:
        """Forget other processes' jobs again (one "preempted" here would be queued anew)."""
        with self.admitter.lock:
            for other in others:
                self.scheduler.finished(other.id)
                self.scheduler.withdraw(other.id)

    def _queue(self, jobs: Iterable[tuple[JobRecord, JobSpec]]) -> None:
        """Queue stored jobs for admission, under one hold of the admitter's lock."""
        with self.admitter.lock:
            for job, spec in jobs:
                self.scheduler.submit(queueing.gang_job(job.id, spec, job.created_at))
        self.admitter.wake()

    def _launch(self, admissions: Sequence[Admission]) -> dict[str, Exception]:
        """Give admitted jobs their ports and GPUs and start their controllers, with one
        read and one write of the store for them all (a burst is admitted by the thousand:
        a round trip each kept the store from the submissions).

        Called by the admitter without its lock: starting processes never holds up a
        submission. The jobs that could not be launched for now, with why: they wait again
        (see ``Admitter``); one that never can (no free port) has failed instead."""
        jobs = self.store.get_jobs([admission.job for admission in admissions])
        failed: dict[str, Exception] = {}
        placed: dict[str, tuple[JobRecord, JobSpec, tuple[TaskSlot, ...]]] = {}
        for admission in admissions:
            job = jobs.get(admission.job)
            try:
                if job is None:
                    raise JobNotFound(f"no job {admission.job!r}")
                ready = self._place(job, admission)
            except Exception as error:
                failed[admission.job] = error
                continue
            if ready is not None:
                placed[job.id] = (job, *ready)
        places = {
            job_id: {slot.key: (slot.address, ",".join(map(str, slot.gpus))) for slot in slots}
            for job_id, (_, _, slots) in placed.items()
        }
        try:
            if places:
                self.store.place_tasks(places)
        except Exception as error:  # they wait again: their next launch reserves ports anew
            for job_id in placed:
                self._free_ports(job_id)
                failed[job_id] = error
            return failed
        for job_id, (job, spec, slots) in placed.items():
            make = partial(self._controller_of, job, spec, placement=Placement(slots))
            try:
                if self.supervised:  # marks the job as one a restarted server picks up
                    self.data_dir.run_dir(job_id).mkdir(parents=True, exist_ok=True)
                self.runner.start(job_id, make=make)
            except Exception as error:  # a full disk, the store away: it waits again
                self._free_ports(job_id)
                failed[job_id] = error
        return failed

    def _place(
        self, job: JobRecord, admission: Admission
    ) -> tuple[JobSpec, tuple[TaskSlot, ...]] | None:
        """The job's spec and its tasks' slots: its ports reserved, open to its own account
        only; None where the job failed instead (no free port, a firewall that cannot guard
        them)."""
        spec = JobSpec.model_validate_json(job.spec)
        try:
            addresses = self.backend.reserve(job.id, spec)
        except Exception as error:  # no free port (or a fault): fail now, saying why
            code = Reason.NO_FREE_PORT if isinstance(error, OSError) else Reason.INTERNAL_ERROR
            self._fail_launch(job.id, code.condition(error))
            return None
        nodes = self.scheduler.cluster.nodes
        # host "" where the tasks learn it (then they report it)
        slots = tuple(
            TaskSlot(*key, *addresses[key], queueing.host_gpus(allocation, nodes))
            for key, allocation in zip(task_keys(spec), admission.allocations, strict=True)
        )
        try:
            self._guard(job, addresses.values())
        except FirewallError as error:  # never started with its ports open to all
            self._free_ports(job.id)
            self._fail_launch(job.id, Reason.COULD_NOT_START.condition(error))
            return None
        except BaseException:  # it waits again: its next launch reserves ports anew
            self._free_ports(job.id)
            raise
        return spec, slots

    def _readdress(self, job: JobRecord, spec: JobSpec) -> dict[TaskKey, Address]:
        """New ports for every task of a job that starts over, open to its own account
        only: taken while its old ones are still held (so none of them comes back), which
        are then given back. Raises as ``reserve`` and ``_guard`` do, keeping the old."""
        fresh = f"{job.id}/fresh"
        try:
            addresses = self.backend.reserve(fresh, spec)
            self._guard(job, addresses.values())
        except BaseException:
            self.backend.release(fresh)
            raise
        self.backend.release(job.id)
        self.backend.hold(job.id, addresses)
        self.backend.release(fresh)
        return addresses

    def _fail_launch(self, job_id: str, condition: Condition) -> None:
        self.admitter.finished(job_id)
        self._end_unstarted(job_id, State.FAILED, condition)

    def _guard(self, job: JobRecord, addresses: Iterable[Address]) -> None:
        """Only the job's own account (and root) may connect to its ports here."""
        if self.firewall is not None and self.team_accounts is not None:
            uid = self.team_accounts.of(job.team).uid
            self.firewall.allow(job.id, uid, {address.port for address in addresses})

    def _free_ports(self, job_id: str) -> None:
        self.backend.release(job_id)
        if self.firewall is not None:
            self.firewall.remove(job_id)

    def _ended(self, job_id: str, state: State | None) -> None:
        """A job's controller returned: free its resources; one it left queued (preempted,
        or off a GPU that turned unhealthy) waits again (its attempts' records stay: its
        next run goes on from its last attempt)."""
        self._free_ports(job_id)
        if state is State.QUEUED:
            self.admitter.requeued(job_id)
        else:
            self.admitter.finished(job_id)

    def expect_resume(self) -> None:
        """Store no new job and stop none until ``resume_jobs`` (which a server runs on a
        thread of its own, while it serves) has read the jobs the last process left.

        A job stored before that read would be queued twice (by its submission and by the
        resume), and run twice; a cancel would act on a job not picked up yet. A server
        calls this before it serves.
        """
        self._left_read.clear()

    def resume(self) -> list[str]:
        """Pick up what an earlier process of this data directory left: ``sweep_tokens``,
        then ``resume_jobs``. Returns the ids of the adopted jobs."""
        self.sweep_tokens()
        return self.resume_jobs()

    def sweep_tokens(self) -> None:
        """Revoke the tokens of notebook jobs that ended while no server followed them (a
        server serves no request before)."""
        notebook_tokens.sweep(self.store, self.data_dir.root)

    def resume_jobs(self) -> list[str]:
        """Pick up the jobs an earlier process of this data directory left unfinished.

        Jobs that were running with supervised tasks (a server's) are adopted where they
        run; jobs that were waiting wait again, in their old order. Whatever admits,
        starts or stops a job waits until all are picked up (the admission lock is held
        meanwhile), and no job is stored before they are read (``expect_resume``).
        Returns the ids of the adopted jobs once their controllers have adopted their tasks.
        """
        try:
            with self.admitter.lock:
                left = self.store.unfinished_jobs()
                self._left_read.set()  # new jobs are stored again, queued once this ends
                resumed = self._pick_up(left)
        finally:
            self._left_read.set()  # also where the read failed (the server stops then)
        self.admitter.wake()
        self.runner.wait_begun(resumed)
        return resumed

    def _pick_up(self, left: Sequence[JobRecord]) -> list[str]:
        """``resume_jobs``' work on the unfinished jobs ``left`` (admission lock held)."""
        resumed, waiting, adopting = [], [], []
        running = set(self.runner.running())
        for job in left:
            if job.id in running:
                continue
            if self._embedded(job.id):
                continue  # an embedded `trainfleet run`'s, waiting or running there
            spec = JobSpec.model_validate_json(job.spec)
            gang = queueing.gang_job(job.id, spec, job.created_at)
            if job.state == State.QUEUED:
                waiting.append(gang)
                continue
            if not self.data_dir.run_dir(job.id).is_dir():
                continue  # run by another process (an embedded `trainfleet run`)
            adopting.append((job, spec, gang))
        ids = [job.id for job, _, _ in adopting]  # their tasks and events read at once:
        tasks = self.store.tasks_of(ids)
        counted = self.store.events_of(ids, COUNTED_STATES, COUNTED_CODES)
        for job, spec, gang in adopting:
            stored = Stored(job, tasks.get(job.id, []), counted.get(job.id, []))
            self.scheduler.adopt(gang, self._allocations(job.id, gang, stored.tasks))
            self._hold_ports(job, stored.tasks)
            make = partial(self._controller_of, job, spec, stored)
            self.runner.start(job.id, resume=True, make=make)
            resumed.append(job.id)
        for job_id in self.store.lingering():  # services in their keep_after
            if self.data_dir.run_dir(job_id).is_dir() and not self._embedded(job_id):
                self.runner.start(job_id, resume=True)
                resumed.append(job_id)
        if self.firewall is not None:  # rules of jobs that ended while none ran go
            self.firewall.reconcile([*resumed, *self.runner.running()])
        for gang in waiting:
            self.scheduler.submit(gang)
        return resumed

    def _hold_ports(self, job: JobRecord, tasks: Sequence[TaskRecord]) -> None:
        """An adopted job keeps its ports, and only its account reaches them: no other job
        may be given them."""
        placed = [_slot(task) for task in tasks if task.address]
        addresses = {slot.key: Address(slot.host, slot.port) for slot in placed}
        self.backend.hold(job.id, addresses)
        self._guard(job, addresses.values())

    def _embedded(self, job_id: str) -> bool:
        """Whether an embedded engine runs (or ran) the job: it has a runner record."""
        from trainfleet.datadir.runners import RUNNER_RECORD

        return (self.data_dir.job_dir(job_id) / RUNNER_RECORD).exists()

    def _allocations(
        self, job_id: str, gang: GangJob, tasks: Sequence[TaskRecord]
    ) -> list[TaskAllocation]:
        """What a running job holds (``tasks``: its stored tasks): the GPUs it was given
        here, else any place that fits (on a cluster's nodes, only its engine knows the
        real one)."""
        if not any(task.gpus for task in tasks):
            places = self.scheduler.cluster.place(job_id, gang.tasks)
            if places is not None:
                self.scheduler.cluster.release(job_id)
                return places
        fractions = [demand.gpu_fraction for demand in gang.tasks]
        return [
            queueing.allocation_of(_slot(task).gpus, fraction, self.scheduler.cluster.nodes)
            for task, fraction in zip(tasks, fractions, strict=True)
        ]

    def wait(self, job_id: str, timeout: float | None = None) -> JobRecord:
        """The job once it has ended here, or as it is when ``timeout`` runs out."""
        self.wait_ended(job_id, timeout)
        return self.get(job_id)

    def wait_ended(self, job_id: str, timeout: float | None = None) -> bool:
        """Wait until the job has ended (waiting in the queue included); False on timeout."""
        return self.admitter.wait(lambda: State(self.get(job_id).state).is_final, timeout)

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord:
        """Stop a job run by this process, make sure a queued one never starts, or end one
        whose controller or runner process died (what is left of its tasks is ended).

        Raises JobActive for a job that another live process runs (stop it there).
        """
        self._left_read.wait()  # then the resume holds the lock: this waits until it ends
        with self.admitter.lock:  # no pass can start the job while this looks at it
            self.admitter.wait_launched(job_id)  # one admitted just now: started, or back
            job = self.get(job_id)
            if State(job.state).is_final or self.runner.cancel(job_id, reason):
                return job
            if not self.admitter.withdraw(job_id) and job.state != State.QUEUED:
                holder = self._holder_elsewhere(job_id)
                if holder is not None:
                    raise JobActive(f"job {job_id} is {job.state} in {holder}")
            self._end_unstarted(job_id, State.CANCELLED, Condition(Code.CANCELLED, reason))
            self.admitter.lock.notify_all()
        return self.get(job_id)

    def _holder_elsewhere(self, job_id: str) -> str | None:
        """The other live process that runs a started job, where one does; None where
        its holder is gone (its runner died, or this server's controller of it did)."""
        from trainfleet.datadir.runners import live_runner, lost_runner

        pid = live_runner(self.data_dir, job_id)
        if pid is not None and pid != os.getpid():
            return f"trainfleet process {pid}"
        if pid is None and not self.supervised and lost_runner(self.data_dir, job_id) is None:
            return "another trainfleet process"  # no runner record: a server's job
        return None

    def _end_unstarted(self, job_id: str, state: State, condition: Condition) -> None:
        """End a job no controller runs (never started, or its controller died): what is
        left of its tasks is ended, and the job recorded as ``state`` for ``condition``."""
        for task in self.store.list_tasks(job_id):
            if State(task.state).is_final:
                continue
            if task.state != State.QUEUED:  # it may have started: nothing of it runs on
                self.backend.abandon(self.data_dir, job_id, (task.role, task.index))
                ended = Reason.STOPPED.condition(condition.message)
            else:
                ended = Reason.NOT_STARTED.condition(condition.message)
            self.store.transition(job_id, State.CANCELLED, ended, task=(task.role, task.index))
        self._revoke_token(job_id)
        self.store.transition(job_id, state, condition, finished_at=time.time())

    def _revoke_token(self, job_id: str) -> None:
        """The token a notebook job holds of its owner, if any, ends with the job."""
        job = self.store.get_job(job_id)
        if job is not None:
            notebook_tokens.revoke(self.store, self.data_dir.root, job_id, job.user)

    def delete(self, job_id: str, force: bool = False) -> None:
        """Forget an ended job and its logs; ``force`` stops a running one first."""
        job = self.get(job_id)
        if not State(job.state).is_final:
            if not force:
                raise JobActive(f"job {job_id} is {job.state}: stop it first, or force the delete")
            self.cancel(job_id, "deleted")
            self.wait_ended(job_id)
        self._revoke_token(job_id)
        self.store.delete_job(job_id)
        shutil.rmtree(self.data_dir.job_dir(job_id), ignore_errors=True)

    def shutdown(self) -> None:
        """Stop following jobs as this process ends.

        A supervised engine (a server) leaves their tasks running: they record how they
        end, and the next server on this data directory adopts them (``resume``), so a
        restart never costs a training run. An embedded engine stops its jobs.
        """
        if not self.supervised:
            self.runner.shutdown()

    def set_queue(self, config: QueueConfig, team: str = "default") -> None:
        """Create or change a queue (``team``: the owner of a new one); waiting jobs are
        looked at again under its new quota."""
        self.store.put_queue(config.name, config.model_dump_json(), team)
        with self.admitter.lock:
            self._queues[config.name] = config
            self.scheduler.set_queue(queueing.queue_spec(config))
        self.admitter.wake()

    def would_start(self, queue: str, resources: Resources) -> Condition | None:
        """Whether a job of one task needing ``resources`` in ``queue`` would start now (None),
        or why it would wait; Unschedulable where it never could (see ``Scheduler``)."""
        spec = JobSpec.model_validate(
            {
                "name": "would-start",
                "queue": queue,
                "roles": {"task": {"command": "true", "resources": resources.model_dump()}},
            }
        )
        with self.admitter.lock:
            return self.scheduler.would_start(queueing.gang_job(spec.name, spec, time.time()))

    def queues(self) -> list[queueing.QueueStatus]:
        with self.admitter.lock:
            return queueing.queue_statuses(self.scheduler, self._queues)

    def get(self, job_id: str) -> JobRecord:
        job = self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r}")
        return job

    def describe(self, job_id: str) -> JobDetails:
        job = self.get(job_id)
        steps = committed_steps(self.data_dir, job)
        return JobDetails(job, self.tasks(job_id), self.events(job_id), steps)

    def events(self, job_id: str, after: int = 0) -> list[EventRecord]:
        """The job's events with an id above ``after``, oldest first."""
        return self.store.list_events(job_id, after=after)

    def tasks(self, job_id: str) -> list[TaskRecord]:
        """The job's tasks in the spec's order, the order they were stored in."""
        tasks = self.store.list_tasks(job_id)
        if not tasks:  # every job has a task: this one does not exist
            self.get(job_id)
        return tasks

    def list(self, limit: int = 100) -> list[JobRecord]:
        return self.store.list_jobs(limit)

    def log_path(self, job_id: str, role: str, index: int) -> Path:
        return self.backend.log_path(self.data_dir, job_id, (role, index))


def _stored_queues(store: Store) -> dict[str, QueueConfig]:
    stored = store.list_queues()
    if not stored:
        return {}
    from trainfleet.spec.queues import QueueConfig  # its models load only when queues exist

    return {name: QueueConfig.model_validate_json(text) for name, text in stored.items()}


def _held_elsewhere(lacks: Sequence[str], others: Sequence[JobRecord]) -> str:
    """``waiting for resources: gpu held by job a-1 of another trainfleet process``."""
    waiting = f"waiting for resources: {', '.join(lacks) or 'capacity'} held by"
    if not others:
        return f"{waiting} another trainfleet process"
    names = ", ".join(job.id for job in others[:3]) + (" ..." if len(others) > 3 else "")
    if len(others) == 1:
        return f"{waiting} job {names} of another trainfleet process"
    return f"{waiting} jobs {names} of other trainfleet processes"


def _slot(task: TaskRecord) -> TaskSlot:
    host, _, port = task.address.rpartition(":")
    gpus = tuple(int(gpu) for gpu in task.gpus.split(",") if gpu)
    return TaskSlot(task.role, task.index, host, int(port), gpus)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""
