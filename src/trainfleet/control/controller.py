"""The job controller: starts a job's tasks, applies its policies and stops it cleanly.

One controller runs one job to its end, one step at a time: ``begin``, then ``handle``
each time it is woken. Backends report exits through a queue and wake it; timers
(backoff, deadline, grace period) are its own, and ``next_due`` says when it must be
woken for them. Whoever runs it (``control.runner``) never runs two of its steps at once,
so every decision is made in one place, one at a time, and an idle job holds no thread.
"""

from __future__ import annotations

import enum
import functools
import heapq
import itertools
import logging
import operator
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from trainfleet.backends.accounts import Account, open_to_tasks
from trainfleet.backends.api import Address, Backend, NotStarted, Outside, TaskHandle
from trainfleet.backends.launch import JobLaunch, ServerAccess
from trainfleet.control import notebook_tokens, policies
from trainfleet.control.rounds import RoundFollower
from trainfleet.datadir.files import modified, write_new
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.conditions import INFRASTRUCTURE_FAILURES, Code, Condition
from trainfleet.domain.records import EventRecord, JobRecord, Reason, State, TaskRecord
from trainfleet.environments.build import BuildFailed, BuildStopped
from trainfleet.environments.cache import Builders, EnvironmentCache, Lease
from trainfleet.environments.recipe import MissingRequirementsFile, Recipe
from trainfleet.environments.task_base import SERVERS, TaskBase
from trainfleet.scheduling.placement import Placement, TaskKey
from trainfleet.spec.models import JobSpec, RestartPolicy
from trainfleet.spec.notebook import ROLE as NOTEBOOK_ROLE
from trainfleet.spec.rendezvous import ROLE as RENDEZVOUS_ROLE
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreUnavailable
from trainfleet.store.transitions import Change

log = logging.getLogger("trainfleet.control")
SUBMITTED = Condition(Code.SUBMITTED)


ROUNDS_EVERY = 1.0
"""Seconds between two looks at an elastic job's rendezvous rounds."""

START_AGAIN_AFTER = 2.0
"""Seconds before a task its backend could not start, being away, is started again."""

GPU_CHECK_EVERY = 2.0
"""Seconds between two looks at the health of the GPUs a job's running tasks hold."""

COUNTED_STATES = frozenset({State.RESTARTING})
COUNTED_CODES = frozenset({Code.REGROUPED})
"""The events a controller counts as it picks a job up: those in these states, or with
these codes (its tasks' restarts, its elastic rounds)."""


@dataclass
class _Task:
    """What the controller knows of one task between events."""

    key: TaskKey
    state: State = State.QUEUED
    restarts: int = 0
    """Its attempt: 0 first, +1 for each restart, the job's too, and each requeue."""
    failures: int = 0
    """Restarts after its program failed (``restart.max_restarts``)."""
    infrastructure: int = 0
    """Restarts after an infrastructure failure (``restart.max_infrastructure``)."""
    where: str = ""
    """Where its attempt runs, for people: ``on tf-node1 (Slurm job 12.0)``."""
    started: float = 0.0
    """When its attempt started (wall clock: compared with its files' times)."""
    stalled: bool = False
    """Its attempt is being stopped for its silence (``progress.timeout``)."""
    alive: bool = False
    """Its process may still run: an exit is still to come (or is queued)."""
    handle: TaskHandle | None = None
    """Its current attempt's, while it may run."""
    condition: Condition = SUBMITTED


@dataclass(frozen=True)
class Stored:
    """A job's record and its tasks as the engine read them just before its controller
    begins (a resume reads every job's at once): its first step reads them no more."""

    job: JobRecord
    tasks: Sequence[TaskRecord]
    counted: Sequence[EventRecord] | None = None
    """Its events of ``COUNTED_STATES`` or ``COUNTED_CODES``, oldest first (None: not
    read)."""


@dataclass(frozen=True)
class _Exited:
    key: TaskKey
    returncode: int
    outside: Outside | None


@dataclass(frozen=True)
class _Placed:
    key: TaskKey
    address: str
    note: str


@dataclass(frozen=True)
class _Cancel:
    condition: Condition


@dataclass(frozen=True)
class _Preempt:
    condition: Condition


class _Phase(enum.Enum):
    TRAINING = "training"
    """Until the outcome is known and the job's own tasks have ended."""
    STORE = "store"
    """Until its rendezvous store, stopped then, has ended."""
    SERVICES = "services"
    """Its end written: until its services (TensorBoard's ``keep_after``) have ended."""


class JobController:
    """Runs one stored job to its end in steps (``begin``, then ``handle`` when woken);
    the reports and ``cancel()`` may come from any thread, and wake it."""

    def __init__(
        self,
        job_id: str,
        spec: JobSpec,
        placement: Placement,
        workdir: Path,
        store: Store,
        backend: Backend,
        data_dir: DataDir,
        base: TaskBase = SERVERS,
        environments: EnvironmentCache | None = None,
        secrets: Mapping[tuple[str, str], str] | None = None,
        account: Account | None = None,
        team: str = "default",
        builders: Builders | None = None,
        sick_gpus: Callable[[], frozenset[int]] | None = None,
        server: ServerAccess | None = None,
        owner: str = "",
        stored: Stored | None = None,
        first_run: bool = False,
        readdress: Callable[[], Mapping[TaskKey, Address]] | None = None,
    ) -> None:
        """``base``: where its tasks' environments start (see ``environments.task_base``);
        ``environments``: where the Python environments its roles ask for are built;
        ``secrets``: the values of the secrets the job names; ``account``: the Unix
        account its tasks run as (its team's), None for this process's own; ``team``:
        the team the job belongs to; ``builders``: the accounts its environments are built
        as (None: this process's own); ``sick_gpus``: the GPUs unhealthy now (None: no
        GPU health is known here); ``server``: where a notebook job's notebook reaches its
        server, which it does with a token of ``owner`` (its user) made when it starts and
        revoked when the job ends (``notebook_tokens``); ``stored``: the job and its tasks
        as read just now, which ``begin`` uses instead of reading them again;
        ``first_run``: the job never began before (no restart of it is counted, no attempt
        of its tasks looked for); ``readdress``: fresh ports for every task, the old ones
        given back (see ``_restart_all``)."""
        self.job_id = job_id
        self.spec = spec
        self.placement = placement
        self.workdir = workdir
        self.store = store
        self.backend = backend
        self.data_dir = data_dir
        self.base = base
        self.environments = environments or EnvironmentCache(data_dir.root / "environments")
        self._leases: list[Lease] = []
        self._secrets = dict(secrets or {})
        files = any(ref.file for _, ref in spec.secret_refs())
        self._secret_dir = data_dir.job_dir(job_id) / "secrets" if files else None
        self._account = account
        self._team = team
        self._builders = builders
        self._handed_over = False
        self._python_dirs: dict[str, Path] = {}
        self._tasks = {slot.key: _Task(slot.key, where=f"on {slot.host}") for slot in placement}
        # A SimpleQueue: a Queue's locks cost more to make than the rest of a controller.
        self._inbox: queue.SimpleQueue[_Exited | _Placed | _Cancel | _Preempt] = queue.SimpleQueue()
        self._stopping = threading.Event()
        """Set with a cancel or a preemption: the environment build, if any, stops."""
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._sequence = itertools.count()
        self._outcome: tuple[State, Condition] | None = None
        self._job_running = False
        """Whether the job was marked running (once all its tasks ran)."""
        self._unwritten: list[Change] | None = None
        """Changes made inside ``_together``, written as it ends."""
        self._first_run = first_run
        self._job_restart_at: float | None = None
        """While the whole job restarts (scope 'job'): when its tasks may start again."""
        self._watching_progress = False
        self._rounds: RoundFollower | None = None
        """An elastic job's rounds, told as events (``_follow_rounds``)."""
        self._rounds_told = 0
        self._sick_gpus = sick_gpus
        self._server = server
        self._owner = owner
        self._phase = _Phase.TRAINING
        self._readdress = readdress
        self._stored = stored
        self.wake: Callable[[], None] = lambda: None
        """Called after each message put in its inbox (any thread): ``handle`` it soon."""

    # -- public ---------------------------------------------------------------

    def begin(self, resume: bool = False) -> State | None:
        """Start every task (or, with ``resume``, pick up a job that an earlier process was
        running: running tasks are adopted, exits that happened meanwhile are applied, and
        tasks that never started are started; no task runs twice at once). Returns the
        state the job was left in once no process of it is left, else None: ``handle``
        follows each wake and at ``next_due``."""
        return self._guarded(lambda: self._open(resume))

    def handle(self) -> State | None:
        """Act on every message in the inbox and every timer due; as ``begin`` returns."""
        return self._guarded(self._drain)

    def next_due(self) -> float | None:
        """When (``time.monotonic``) its next timer is due, if it has one."""
        return self._timers[0][0] if self._timers else None

    def _guarded(self, step: Callable[[], State | None]) -> State | None:
        ended = True  # unless the step says it goes on
        try:
            try:
                state = step()
            except StoreUnavailable:
                raise  # the runner waits outages out: only a store given up on gets here
            except Exception as error:  # no job is left starting for ever
                state = self._broke(error)
            ended = state is not None
            return state
        except StoreUnavailable:
            raise
        except BaseException:
            # A bug here must not leave a job's processes running without a controller.
            self._kill_remaining()
            raise
        finally:
            if ended:
                for lease in self._leases:
                    lease.release()
                if self._secret_dir is not None:
                    shutil.rmtree(self._secret_dir, ignore_errors=True)

    def _open(self, resume: bool) -> State | None:
        stored, self._stored = self._stored, None
        if stored is not None:
            job: JobRecord | None = stored.job
        else:
            job = self.store.get_job(self.job_id) if resume else None
        if resume and job is not None and State(job.state).is_final:
            self._linger(job)
        elif resume and job is not None and job.started_at is not None:
            self._recover(job, stored)
        else:
            self._begin()
        return self._advance()

    def _drain(self) -> State | None:
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                message = None
            self._on(message)
            state = self._advance()
            if state is not None or message is None:
                return state

    def _advance(self) -> State | None:
        """Go on through the job's end as far as its tasks let it; its state once done."""
        if self._phase is _Phase.TRAINING:
            if self._outcome is None or any(
                task.alive for key, task in self._tasks.items() if self._trains(key)
            ):
                return None
            # Its agents are gone, their exit barrier passed: the store has no one left to
            # serve (stopped before the job ends: nothing of a finished job is left running).
            self._terminate(self._is_store)
            self._phase = _Phase.STORE
        if self._phase is _Phase.STORE:
            if any(task.alive for key, task in self._tasks.items() if self._is_store(key)):
                return None
            assert self._outcome is not None
            state, condition = self._outcome
            finished_at = None if state is State.QUEUED else time.time()  # preempted: it waits
            if state is not State.QUEUED:  # revoked before anyone sees the job ended
                self._revoke_token()
            self._write(Change(state, condition, fields={"finished_at": finished_at}))
            self._phase = _Phase.SERVICES
        if any(task.alive for task in self._tasks.values()):  # its services' keep_after
            return None
        assert self._outcome is not None
        return self._outcome[0]

    def _broke(self, error: Exception) -> State:
        """A fault of trainfleet's own (a bug, a file it could not write): the job fails,
        saying what, and nothing of it runs on."""
        log.error("job %s: its controller failed", self.job_id, exc_info=error)
        self._kill_remaining()
        broke = Reason.INTERNAL_ERROR.condition(f"{type(error).__name__}: {error}")
        for task in self._tasks.values():
            if not task.state.is_final:
                self._set_task(task, State.FAILED, broke, finished_at=time.time())
        self._revoke_token()
        self._write(Change(State.FAILED, broke, fields={"finished_at": time.time()}))
        return State.FAILED

    def _begin(self) -> None:
        # The transition clears why the job waited in the queue: it no longer applies.
        admitted = Condition(Code.ADMITTED)
        self._write(Change(State.STARTING, admitted, fields={"started_at": time.time()}))
        if self._own_workdir():  # one sent with no folder gets an empty one now
            self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._hand_over()  # a team's own environment may be built from its folder
        if not self._setup():
            return
        if not self._first_run:
            self._count_restarts(requeued=True)
        with self._together():  # its tasks started and the job running: one write
            self._start(self._tasks)
            self._follow_rounds()
            self._check_gpus()
            self._watch_deadline(time.time())  # time waiting in a cluster's queue counts too
            if not self.backend.queues_tasks:
                self._mark_running()

    def _watch_deadline(self, started_at: float) -> None:
        if self.spec.deadline is not None:
            self._after(
                max(0.0, started_at + self.spec.deadline - time.time()), self._deadline_passed
            )

    def _setup(self, state: State = State.STARTING) -> bool:
        """Build (or find) the Python environments the roles ask for, in the ``setup``
        phase: its events say what and how long, its log is the job's ``setup.log``.

        False, with the job failed and the reason, when one cannot be built. ``state``:
        the job's, which its events keep.
        """
        recipes: dict[str, list[str]] = {}
        try:
            found = {}
            for role in self.spec.roles:
                wanted = self.spec.environment_of(role)
                if wanted is not None:
                    recipe = Recipe.of(wanted, self.workdir, self._team)
                    found[recipe.digest] = recipe
                    recipes.setdefault(recipe.digest, []).append(role)
        except MissingRequirementsFile as error:
            self._finish(State.FAILED, Reason.ENVIRONMENT_BUILD_FAILED.condition(error))
            return False
        log = self.data_dir.setup_log(self.job_id)
        for digest, roles in recipes.items():
            recipe = found[digest]
            self._note(f"setup: preparing {recipe.describe()} for {', '.join(roles)}", state)
            try:
                lease = self.environments.lease(
                    recipe, log, self._builders, self.workdir, self._stopping.is_set
                )
            except BuildFailed as error:
                self._finish(State.FAILED, Reason.ENVIRONMENT_BUILD_FAILED.condition(error))
                return False
            except BuildStopped:
                return False  # the job's stop, waiting in the inbox, ends it
            self._leases.append(lease)
            how = f"built in {lease.seconds:.1f}s" if lease.built else "cached"
            self._note(f"setup: {recipe.describe()} ready ({how})", state)
            self._python_dirs.update(dict.fromkeys(roles, lease.bin_dir))
        return True

    def _note(self, message: str, state: State) -> None:
        """An event of the setup that changes no state (the job stays in ``state``); a job
        that has not started yet waits for it."""
        building = Condition(Code.WAITING_FOR_ENVIRONMENT, message)
        self.store.note(self.job_id, state, building, waiting=state is State.STARTING)

    def _recover(self, job: JobRecord, known: Stored | None) -> None:
        """Rebuild what an earlier controller knew from the store and the task records
        (``known``: what was read of them already)."""
        assert job.started_at is not None
        never_started = []
        with self._together():  # every adopted task in one write
            for stored in self.store.list_tasks(self.job_id) if known is None else known.tasks:
                task = self._tasks[(stored.role, stored.index)]
                task.state, task.restarts = State(stored.state), stored.restarts
                code = stored.code if isinstance(stored.code, Code) else Code.STARTED
                task.condition = Condition(code, stored.reason)
                if task.state.is_final:
                    continue
                attempt = self.backend.last_attempt(self.data_dir, self.job_id, task.key)
                if attempt is None:
                    never_started.append(task.key)
                elif attempt == task.restarts and task.state is State.RESTARTING:
                    self._after(0, functools.partial(self._restart, [task.key]))  # exit was handled
                else:
                    task.restarts = attempt
                    self._adopt(task, attempt)
        self._count_restarts(counted=known.counted if known is not None else None)
        wants = any(self.spec.environment_of(role) for role in self.spec.roles)
        self._hand_over()
        self._job_running = State(job.state) is State.RUNNING  # adopting changed no job state
        if wants and not self._setup(State(job.state)):
            return
        self._start(never_started)
        self._follow_rounds()
        self._check_gpus()
        self._watch_deadline(job.started_at)
        self._evaluate()

    def _count_restarts(
        self, requeued: bool = False, counted: Sequence[EventRecord] | None = None
    ) -> None:
        """Each task's restarts of either kind so far, from the job's events (a restarted
        server, a job run again after a preemption, keep counting); ``requeued``: a new
        run of the job, whose tasks go on from their last attempt; ``counted``: its events
        of ``COUNTED_STATES`` or ``COUNTED_CODES``, where they were read already."""
        if counted is None:
            counted = self.store.events_of([self.job_id], COUNTED_STATES, COUNTED_CODES).get(
                self.job_id, []
            )
        for event in counted:
            self._rounds_told += event.code == Code.REGROUPED
            if event.state != State.RESTARTING or not event.task:
                continue
            role, _, index = event.task.rpartition("/")
            task = self._tasks.get((role, int(index)))
            if task is None:
                continue
            if event.code in INFRASTRUCTURE_FAILURES:
                task.infrastructure += 1
            elif event.code in (Code.PROGRAM_FAILED, Code.EXITED, Code.GPU_SHARING_LOST):
                task.failures += 1
        for key, task in self._tasks.items() if requeued else ():
            attempt = self.backend.last_attempt(self.data_dir, self.job_id, key)
            if attempt is not None:
                task.restarts = attempt + 1

    def _linger(self, job: JobRecord) -> None:
        """An ended job whose services outlived it (TensorBoard's ``keep_after``) when an
        earlier process stopped: adopt what still runs, stop it when ``keep_after`` ends
        (counted from the job's end), and change nothing else."""
        state = State(job.state)
        code = job.code if isinstance(job.code, Code) else Code.EXITED
        self._outcome = (state, Condition(code, job.reason))
        self._revoke_token()  # where a server stopped between the job's end and its token's
        with self._together():  # every adopted task in one write
            for stored in self.store.list_tasks(self.job_id):
                task = self._tasks[(stored.role, stored.index)]
                task.state, task.restarts = State(stored.state), stored.restarts
                code = stored.code if isinstance(stored.code, Code) else Code.STARTED
                task.condition = Condition(code, stored.reason)
                attempt = self.backend.last_attempt(self.data_dir, self.job_id, task.key)
                if not task.state.is_final and attempt is not None:
                    self._adopt(task, attempt)
        keep = self.spec.tensorboard.keep_after if self.spec.tensorboard is not None else 0.0
        left = (job.finished_at or time.time()) + keep - time.time()
        self._after(max(0.0, left), lambda: self._terminate(lambda key: True))
        self._phase = _Phase.SERVICES  # its end is written already

    def _adopt(self, task: _Task, attempt: int) -> None:
        task.alive = True  # adopt() queues the exit at once if the task has ended
        handle = self.backend.adopt(self.data_dir, self.job_id, task.key, attempt, self)
        task.handle = handle
        if handle is not None:
            status = self.backend.describe(handle)
            adopted = Condition(Code.ADOPTED, f"adopted, {status.where}")
            self._set_task(task, State.RUNNING, adopted, pid=status.pid, restarts=task.restarts)

    def exited(self, key: TaskKey, returncode: int, outside: Outside | None = None) -> None:
        """The backend's report that a task ended (any thread)."""
        self._inbox.put(_Exited(key, returncode, outside))
        self.wake()

    def placed(self, key: TaskKey, address: str, note: str) -> None:
        """The backend's report of where a task landed (any thread)."""
        self._inbox.put(_Placed(key, address, note))
        self.wake()

    def cancel(self, reason: str = "cancelled by user") -> None:
        """Stop the job (a second call kills what is still running)."""
        self._stopping.set()  # a build under way ends at once
        self._inbox.put(_Cancel(Condition(Code.CANCELLED, reason)))
        self.wake()

    def preempt(self, reason: str) -> None:
        """Stop every task (SIGTERM, then SIGKILL after the grace period) and end the run
        with the job back in state ``queued``, to start again when it is admitted."""
        self._stopping.set()
        self._inbox.put(_Preempt(Condition(Code.PREEMPTED, reason)))
        self.wake()

    # -- the loop -------------------------------------------------------------

    def _on(self, message: _Exited | _Placed | _Cancel | _Preempt | None) -> None:
        """Act on one message, then on the timers due."""
        if isinstance(message, _Exited):
            self._on_exit(message.key, policies.exit_code(message.returncode), message.outside)
        elif isinstance(message, _Placed):
            self._on_placed(message)
        elif isinstance(message, _Cancel):
            if self._outcome is None:
                self._finish(State.CANCELLED, message.condition)
            else:
                self._kill_remaining()
        elif isinstance(message, _Preempt) and self._outcome is None:
            self._finish(State.QUEUED, message.condition)
        while self._timers and self._timers[0][0] <= time.monotonic():
            heapq.heappop(self._timers)[2]()

    def _hand_over(self) -> None:
        """Give the job's own folder to its tasks' account, once (it may hold their links
        afterwards: it is walked without following them); keep its logs and records from
        it."""
        if self._account is None or self._handed_over:
            return
        job_dir = self.data_dir.job_dir(self.job_id)
        open_to_tasks([job_dir])
        for private in (job_dir / "logs", self.data_dir.run_dir(self.job_id)):
            private.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(private, 0o700)
        own = self._own_workdir() and self.workdir.is_dir()
        if own and os.lstat(self.workdir).st_uid != self._account.uid:
            self._account.hand_over(self.workdir)
        self._handed_over = True

    def _own_workdir(self) -> bool:
        """Whether the job runs in a folder of its own, not in a shared one."""
        return self.workdir.is_relative_to(self.data_dir.job_dir(self.job_id))

    def _after(self, seconds: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + seconds, next(self._sequence), action))

    # -- tasks ----------------------------------------------------------------

    def _start(self, keys: Iterable[TaskKey]) -> None:
        """Launch the next attempt of these tasks together (one that cannot start fails)."""
        attempts = {key: self._tasks[key].restarts for key in keys}
        if not attempts:
            return
        server = self._server_access() if any(key[0] == NOTEBOOK_ROLE for key in attempts) else None
        job = JobLaunch(
            self.job_id,
            self.spec,
            self.placement,
            self.workdir,
            self.data_dir,
            attempts,
            self.base,
            self._python_dirs,
            secrets=self._secrets,
            secret_dir=self._secret_dir,
            account=self._account,
            team=self._team,
            server=server,
        )
        problem = job.checkpoint_problem()
        if problem is not None:
            self._finish(State.FAILED, Reason.COULD_NOT_START.condition(problem))
            return
        job.write_secret_files()
        job.make_task_folders()
        queued = self.backend.queues_tasks
        with self._together():
            for key, started in self.backend.start(job, self).items():
                task = self._tasks[key]
                if isinstance(started, NotStarted) and started.retry:  # its backend is away
                    again = f"{started.reason}; trying again in {START_AGAIN_AFTER:g}s"
                    self._set_task(task, task.state, Condition(Code.WAITING_FOR_RESOURCES, again))
                    self._after(START_AGAIN_AFTER, functools.partial(self._start_again, key))
                    continue
                if isinstance(started, NotStarted):
                    failed = Reason.COULD_NOT_START.condition(started.reason)
                    self._set_task(task, State.FAILED, failed)
                    continue
                task.alive, task.handle, task.started = True, started, time.time()
                status = self.backend.describe(started)
                task.where = f"on {self.placement.slot(*key).host} ({status.where})"
                verb = "submitted" if queued else "started"
                if task.restarts:
                    verb = f"re{verb} (restart {task.restarts})"
                self._set_task(
                    task,
                    State.STARTING if queued else State.RUNNING,
                    Condition(Code.STARTED, f"{verb}, {status.where}"),
                    pid=status.pid,
                    started_at=time.time(),
                    restarts=task.restarts,
                    exit_code=None,
                    address=self.placement.slot(*key).address,
                )
        if self.spec.progress is not None and not self._watching_progress:
            self._watching_progress = True
            self._after(self._progress_check_every(), self._check_progress)
        self._evaluate()

    def _start_again(self, key: TaskKey) -> None:
        """Start the attempt its backend could not start, as it was away (the same one)."""
        task = self._tasks[key]
        if self._outcome is None and not task.alive and not task.state.is_final:
            self._start([key])

    def _server_access(self) -> ServerAccess | None:
        """Where the notebook reaches its server, with its owner's token (made now, or
        found again: a restarted notebook gets the same one)."""
        if self._server is None:
            return None
        token = notebook_tokens.issue(self.store, self.data_dir.root, self.job_id, self._owner)
        return replace(self._server, token=token or "")

    def _revoke_token(self) -> None:
        """The notebook's token ends with its job (one made by an earlier server too)."""
        if self.spec.notebook is not None:
            notebook_tokens.revoke(self.store, self.data_dir.root, self.job_id, self._owner)

    def _progress_check_every(self) -> float:
        assert self.spec.progress is not None
        return min(5.0, self.spec.progress.timeout / 4)

    def _check_progress(self) -> None:
        """Stop each running task silent for longer than ``progress.timeout``: no line in
        its log, no touch of its heartbeat (its exit then restarts it as ``stalled``)."""
        assert self.spec.progress is not None
        if self._outcome is not None:
            return
        now, timeout = time.time(), self.spec.progress.timeout
        for task in self._tasks.values():
            if task.state is not State.RUNNING or not task.alive or task.stalled:
                continue
            files = (
                self.data_dir.log_path(self.job_id, *task.key),
                self.data_dir.heartbeat(self.job_id, *task.key),
            )
            if now - max(task.started, *(modified(path) for path in files)) > timeout:
                task.stalled = True
                self._terminate(functools.partial(operator.eq, task.key), "stalled")
        self._after(self._progress_check_every(), self._check_progress)

    def _follow_rounds(self) -> None:
        """Tell each round its elastic group completes as an event (``describe`` shows the
        world size over time), looking every second while the job runs."""
        if self._outcome is not None or not self.spec.hosts_rendezvous():
            return
        if self._rounds is None:
            share = self.data_dir.task_share(self.job_id)
            self._rounds = RoundFollower(share, DataDir.ROUNDS, self._rounds_told)
        assert self.spec.pytorch is not None and self.spec.pytorch.elastic is not None
        most = self.spec.pytorch.elastic.max_replicas
        state = State.RUNNING if self._job_running else State.STARTING
        for round_ in self._rounds.new_rounds():
            self.store.note(self.job_id, state, Condition(Code.REGROUPED, round_.describe(most)))
        self._after(ROUNDS_EVERY, self._follow_rounds)

    def _check_gpus(self) -> None:
        """Put the job back in its queue when a GPU its running tasks hold turns unhealthy:
        admitted again, it runs on healthy GPUs (the scheduler gives that one to no one)."""
        held = {gpu: key for key in self._tasks for gpu in self.placement.slot(*key).gpus}
        if self._outcome is not None or self._sick_gpus is None or not held:
            return
        sick = sorted(set(held) & self._sick_gpus())
        if sick:
            names = ", ".join(f"GPU {gpu} ({policies.task_name(held[gpu])})" for gpu in sick)
            why = f"{names} unhealthy: queued again to run on healthy GPUs"
            self._finish(State.QUEUED, Condition(Code.GPU_UNHEALTHY, why))
            return
        self._after(GPU_CHECK_EVERY, self._check_gpus)

    def _on_placed(self, placed: _Placed) -> None:
        """A task waits in the cluster's queue (no address yet), or runs at its address."""
        task = self._tasks[placed.key]
        if not task.alive or task.state.is_final or task.state is State.RESTARTING:
            return
        if not placed.address:  # in the cluster's queue
            self._set_task(task, task.state, Condition(Code.WAITING_FOR_RESOURCES, placed.note))
            return
        placed_at = Condition(Code.STARTED, placed.note)
        task.where = placed.note.removeprefix("running ")
        with self._together():
            self._set_task(task, State.RUNNING, placed_at, address=placed.address)
            if all(t.state is State.RUNNING for t in self._tasks.values() if t.alive):
                self._mark_running()

    def _mark_running(self) -> None:
        if self._outcome is None and not self._job_running:
            self._job_running = True
            self._write(Change(State.RUNNING, Condition(Code.STARTED)))

    def _restart(self, keys: Iterable[TaskKey]) -> None:
        if self._outcome is not None:
            return
        restarting = [key for key in keys if self._tasks[key].state is State.RESTARTING]
        for key in restarting:
            self._tasks[key].restarts += 1
        self._start(restarting)

    def _on_exit(self, key: TaskKey, code: int, outside: Outside | None = None) -> None:
        task = self._tasks[key]
        task.alive = False
        if task.stalled and outside is None:
            assert self.spec.progress is not None
            silent = f"silent for over {self.spec.progress.timeout:g}s"
            outside = Outside(silent, cause=Code.STALLED)
        task.stalled = False
        exit_text = policies.describe_exit(code) + (f" ({outside.what})" if outside else "")
        done: dict[str, object] = {"exit_code": code, "finished_at": time.time()}
        if outside is not None and outside.cancelled and self._outcome is None:
            self._set_task(task, State.CANCELLED, Condition(Code.CANCELLED, exit_text), **done)
            self._finish(State.CANCELLED, Condition(Code.CANCELLED, outside.what))
            return
        if self._outcome is not None:
            state, condition = self._stopped_state(key, code)
            self._set_task(task, state, condition, **done)
            return
        if self._job_restart_at is not None:  # stopped (or died) for the job's restart
            restarting = Condition(Code.RESTARTING, f"{exit_text}; {task.condition.message}")
            self._set_task(task, State.RESTARTING, restarting, **done)
            self._restart_job_when_stopped()
            return
        restart = self.spec.restart
        cause = policies.restart_cause(
            code, outside.cause if outside else None, restart.requeue_exit_code
        )
        if self._is_store(key) and outside is None and code > 128:  # killed: not a program's
            cause = Code.RENDEZVOUS_LOST
        infrastructure = cause in INFRASTRUCTURE_FAILURES
        if infrastructure:  # whatever the policy
            wants_restart, used, limit = True, task.infrastructure, restart.max_infrastructure
        else:
            policy = self.spec.restart_policy_of(key[0])
            if code == 0:
                wants_restart = policy is RestartPolicy.ALWAYS and not self._succeeds_job(key)
            else:
                wants_restart = policies.retries_failure(policy, code)
            used, limit = task.failures, restart.max_restarts
        if wants_restart and used < limit:
            if infrastructure:
                task.infrastructure += 1
            else:
                task.failures += 1
            delay = restart.backoff.delay(used)
            exited = f"{exit_text} {task.where}"
            alone = self._restarts_alone(key)
            moved = alone and self._port_taken(key)
            if moved:
                exited += (
                    f"; its port {self.placement.slot(*key).port} was taken by another program"
                )
            if not alone or moved:
                restarting = Condition(cause, f"{exited}; restarting the job")
                self._set_task(task, State.RESTARTING, restarting, **done)
                self._restart_job(key, delay)
            else:
                restarting = Condition(cause, f"{exited}; restarting in {delay:g}s")
                self._set_task(task, State.RESTARTING, restarting, **done)
                self._after(delay, lambda: self._restart([key]))
            return
        ended = cause if cause not in (Code.PROGRAM_FAILED, Code.EXITED) else Code.EXITED
        if code == 0:
            self._set_task(task, State.SUCCEEDED, Condition(ended, exit_text), **done)
        else:
            tries = f" after {used} restart(s)" if used else ""
            failed = Condition(ended, f"exited with {exit_text}{tries}")
            self._set_task(task, State.FAILED, failed, **done)
        self._evaluate()

    def _restart_job(self, failed: TaskKey, delay: float) -> None:
        """Stop every other task, then start them all again once all are gone.

        A static torchrun or JAX group cannot take one restarted node back: it would wait
        for peers that have moved on. So the whole job starts over, as torchrun itself
        restarts all its local workers.
        """
        self._job_restart_at = time.monotonic() + delay
        because = Condition(Code.RESTARTING, f"restarting with {policies.task_name(failed)}")
        for key, task in self._tasks.items():
            if key != failed:
                self._set_task(task, State.RESTARTING, because)
        self._terminate(lambda key: True)
        self._restart_job_when_stopped()

    def _restart_job_when_stopped(self) -> None:
        if self._job_restart_at is None or any(task.alive for task in self._tasks.values()):
            return
        self._after(max(0.0, self._job_restart_at - time.monotonic()), self._restart_all)

    def _restart_all(self) -> None:
        """Start every task again, each at a new port where the backend gives them: a port
        taken meanwhile by another program of the node (a task that could not bind it may
        be why the job restarts) would fail every attempt. The job's tasks all learn the
        new addresses, as they all start again."""
        self._job_restart_at = None
        if self._readdress is not None:
            try:
                addresses = self._readdress()
            except Exception as error:  # no free port, a firewall that failed: the old ones
                log.warning("job %s restarts at its old ports: %s", self.job_id, error)
            else:
                self.placement = self.placement.at(addresses)
        self._restart(self._tasks)

    def _stopped_state(self, key: TaskKey, code: int) -> tuple[State, Condition]:
        """The end of a task that exited while the job was being stopped."""
        assert self._outcome is not None
        outcome, why = self._outcome
        if outcome is State.QUEUED:
            preempted = f"{policies.describe_exit(code)}; {why.message}"
            return State.QUEUED, Condition(why.code, preempted)
        if code == 0:
            return State.SUCCEEDED, Condition(Code.EXITED, "exit code 0")
        if outcome is State.SUCCEEDED and not self.spec.is_tracked(key[0]):
            return State.SUCCEEDED, Reason.STOPPED.condition("training finished")
        return State.CANCELLED, Reason.STOPPED.condition(why.message)

    def _succeeds_job(self, key: TaskKey) -> bool:
        states = {k: t.state for k, t in self._tasks.items()}
        states[key] = State.SUCCEEDED
        outcome = policies.job_outcome(self.spec, states, {})
        return outcome is not None and outcome[0] is State.SUCCEEDED

    def _set_task(self, task: _Task, state: State, condition: Condition, **fields: object) -> None:
        task.state, task.condition = state, condition
        self._write(Change(state, condition, task.key, fields))

    def _write(self, change: Change) -> None:
        """Write ``change`` (see ``Store.transition``), or keep it for ``_together``'s end."""
        if self._unwritten is not None:
            self._unwritten.append(change)
        else:
            self.store.transitions(self.job_id, [change])

    @contextmanager
    def _together(self) -> Iterator[None]:
        """The changes made inside, written in one transaction as it ends (a job's tasks
        started together: one write, not one per task), in their order."""
        if self._unwritten is not None:  # inside another: written as that one ends
            yield
            return
        self._unwritten = []
        try:
            yield
        finally:
            changes, self._unwritten = self._unwritten, None
            if changes:
                self.store.transitions(self.job_id, changes)

    # -- the job --------------------------------------------------------------

    def _evaluate(self) -> None:
        states = {key: task.state for key, task in self._tasks.items()}
        reasons = {key: task.condition.message for key, task in self._tasks.items()}
        outcome = policies.job_outcome(self.spec, states, reasons)
        if outcome is not None:
            state, message = outcome
            self._finish(state, Condition(self._end_code(state), message))

    def _end_code(self, state: State) -> Code:
        """A job that fails because a task failed ends with that task's code (the first
        one's, as ``job_outcome`` names it); else with its state's."""
        if state is State.SUCCEEDED:
            return Code.SUCCEEDED
        failed = (t.condition.code for t in self._tasks.values() if t.state is State.FAILED)
        return next(failed, Code.FAILED)

    def _deadline_passed(self) -> None:
        if self._outcome is None:
            deadline = Reason.DEADLINE_EXCEEDED.condition(f"{self.spec.deadline:g}s")
            self._finish(State.FAILED, deadline)

    def _finish(self, state: State, condition: Condition) -> None:
        """Decide the job's end and stop every task still running or waiting to restart.

        On success, tracked tasks still running are finishing too (a torchrun agent in
        its exit barrier, a worker writing its last lines): they get one grace period
        to end on their own before they are stopped like the rest.
        """
        self._outcome = (state, condition)
        if any(task.alive for task in self._tasks.values()):  # shown while they stop
            self.store.update_job(self.job_id, code=condition.code.value, reason=condition.message)
        for task in self._tasks.values():
            if not task.alive and not task.state.is_final:
                if state is State.QUEUED:
                    self._set_task(task, State.QUEUED, condition)
                else:
                    not_started = Reason.NOT_STARTED.condition(condition.message)
                    self._set_task(task, State.CANCELLED, not_started)
        if state is State.SUCCEEDED:
            self._terminate(lambda key: not self.spec.is_tracked(key[0]) and self._trains(key))
            self._after(self.spec.grace_period, lambda: self._terminate(self._trains))
        else:
            self._terminate(self._trains)
        services = self.spec.service_roles()
        if self.spec.tensorboard is not None:  # a preempted job gives its place back at once
            keep = 0.0 if state is State.QUEUED else self.spec.tensorboard.keep_after
            self._after(keep, lambda: self._terminate(lambda key: key[0] in services))

    def _restarts_alone(self, key: TaskKey) -> bool:
        """Whether the failed task ``key`` starts again without the rest of the job: where
        its scope says task, it is no rendezvous store (the group's rounds went with it), and
        no peer would look for it where it was (a backend that restarts whole jobs may put
        it on another host; the members of a group that meets in trainfleet's store find
        each other there, wherever they land)."""
        if self.spec.restart_scope() == "job" or self._is_store(key):
            return False
        return not self.backend.restarts_whole_jobs or self.spec.hosts_rendezvous()

    def _port_taken(self, key: TaskKey) -> bool:
        """Whether another program holds the port of the task that is to restart alone:
        there every attempt would fail, and its peers know it at that port only, so the
        whole job starts over at new ones (``_restart_all``)."""
        if self._readdress is None or self.spec.roles[key[0]].port is not None:
            return False  # no new port to be had: none given, or the role's own fixed one
        slot = self.placement.slot(*key)
        return self.backend.taken(Address(slot.host, slot.port))

    def _is_store(self, key: TaskKey) -> bool:
        """Whether the task is the job's rendezvous store, which lives until its training
        tasks have all ended (their exit barrier, too, meets in it)."""
        return key[0] == RENDEZVOUS_ROLE and self.spec.hosts_rendezvous()

    def _trains(self, key: TaskKey) -> bool:
        """Whether the task is of the job's own work: neither a service nor its store."""
        return key[0] not in self.spec.service_roles() and not self._is_store(key)

    def _terminate(self, which: Callable[[TaskKey], bool], why: str | None = None) -> None:
        """SIGTERM the chosen running tasks, each told ``why`` first (by default, what the
        job's end says); SIGKILL them when the grace period ends."""
        targets = {
            key: task.handle
            for key, task in self._tasks.items()
            if task.alive and task.handle is not None and which(key)
        }
        outcome = (self._outcome[0], self._outcome[1].code) if self._outcome else None
        for key, handle in targets.items():
            self._tell_stop(key, why or policies.stop_reason(outcome))
            self.backend.stop(handle)
        if targets:
            self._after(self.spec.grace_period, lambda: self._kill(targets))

    def _tell_stop(self, key: TaskKey, why: str) -> None:
        """Write why the task's attempt is stopped where it reads it (once: a second stop
        of the attempt only kills)."""
        attempt = self._tasks[key].restarts
        path = self.data_dir.stop_file(self.job_id, *key, attempt)
        group = self._account.gid if self._account is not None else None
        try:
            write_new(path.parent, path.name, f"{why}\n".encode(), 0o640, group)
        except FileExistsError:
            pass
        except OSError as error:  # a folder of an older trainfleet's job: stopped all the same
            log.warning("job %s: cannot write %s: %s", self.job_id, path, error)

    def _kill(self, targets: dict[TaskKey, TaskHandle]) -> None:
        """SIGKILL these attempts of tasks if they still run (not a later attempt)."""
        for key, handle in targets.items():
            task = self._tasks[key]
            if task.alive and task.handle == handle:
                self.backend.stop(handle, force=True)

    def _kill_remaining(self) -> None:
        self._kill(
            {key: task.handle for key, task in self._tasks.items() if task.handle is not None}
        )
