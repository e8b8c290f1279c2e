"""Gang admission: a job gets every task's resources at once, or none of them.

The scheduler is pure (no I/O, no clock): jobs come in with ``submit``, ``schedule``
returns what to start and what to preempt, ``finished`` gives resources back.

- Order: priority (higher first), then submission order, across all queues.
- A job is admitted when its queue's quota allows it (borrowing from the cohort if it
  must) and every one of its tasks fits on the nodes. Nothing is held by a job that
  is not admitted, so two jobs can never deadlock each other holding halves.
- The first job that waits for capacity reserves what is free now and it could use;
  later jobs start ahead of it (backfill) only with what is left, so they never delay
  it. Once ``backfill_depth`` jobs wait for capacity in a pass, as Slurm bounds it, the
  pass looks only at the first waiting job of each queue it has not looked at yet (the
  queue's head, as Kueue does), so that one queue's backlog never starves another.
- A job blocked on its queue's quota costs no other queue a chance: it counts only
  towards its own queue's depth (``backfill_depth`` such jobs a queue, a pass); a
  later job of its queue that asks for the same amounts is known blocked without a
  second check (a pass only ever adds to what queues use); and once the smallest
  amount of a resource that all of a queue's waiting jobs ask for is over its quota,
  the pass looks at no more of them. New jobs over quota that a pass passed over are
  given their reason.
- Preemption: a waiting job may stop lower-priority jobs of its own queue, and jobs of
  its cohort that borrow while its own queue is within its nominal quota. The fewest
  such victims are chosen, least valuable first; they keep their resources until they
  have stopped (``finished``), then go back to the queue in their old place, though
  they do not start again before the job they were stopped for (no stop-start loop).
  Only the first ``backfill_depth`` waiting jobs may preempt in a pass.
  A job that preempted is nominated: each pass looks at it first among the jobs of its
  priority and holds for it the capacity it can use and its quota, so that what its
  victims free goes to it and not to a job of its priority that happens to come earlier
  (no preemption thrash); a job of higher priority still goes first.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import Reason
from trainfleet.scheduling.cluster import Cluster, Node, TaskAllocation, TaskDemand
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.scheduling.queues import QueueSpec, QuotaBook
from trainfleet.scheduling.resources import Resources, describe, total

RESERVED = "\0reserved"
"""The holder name of the blocked head's reservation during one pass."""


@dataclass(frozen=True)
class GangJob:
    """A job as the scheduler sees it: its tasks' demands, queue, priority and order."""

    id: str
    tasks: tuple[TaskDemand, ...]
    queue: str = "default"
    priority: int = 0
    order: float = 0.0
    """Submission time (or any increasing number): earlier goes first at equal priority."""

    @cached_property
    def total(self) -> Resources:
        return total(task.resources for task in self.tasks)

    @cached_property
    def amounts(self) -> tuple[tuple[str, int], ...]:
        """``total`` as a hashable key: jobs that ask for the same amounts have equal ones."""
        return tuple(self.total.items())


@dataclass(frozen=True)
class Admission:
    """A job to start now, with each task's place (in the order of ``GangJob.tasks``)."""

    job: str
    allocations: tuple[TaskAllocation, ...]


@dataclass(frozen=True)
class Preemption:
    """A running job to stop (SIGTERM, grace period) so that ``by`` can start."""

    job: str
    by: str
    reason: str


@dataclass
class Decisions:
    """What one ``schedule`` pass decided; ``considered`` counts the jobs it examined."""

    admitted: list[Admission] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)
    considered: int = 0
    waiting: list[str] = field(default_factory=list)
    """The jobs it looked at that still wait, in order: their reasons are new."""
    passed_over: list[str] = field(default_factory=list)
    """Jobs new since the last pass that it did not look at but found over their quota."""


@dataclass
class _Admitted:
    job: GangJob
    borrows: bool
    sequence: int
    stopping_for: str | None = None


class Scheduler:
    """Admits whole jobs onto nodes, within their queues' quotas. See the module doc."""

    def __init__(
        self, nodes: Sequence[Node], queues: Iterable[QueueSpec] = (), backfill_depth: int = 64
    ) -> None:
        self.cluster = Cluster(nodes)
        self._empty = Cluster(nodes)  # always empty: whether a job's tasks fit together
        self._empty_lock = threading.Lock()  # so that ``check`` may run beside a pass
        self.quotas = QuotaBook(queues)
        self.backfill_depth = backfill_depth
        self._pending: list[tuple[tuple[int, float, int], GangJob]] = []
        self._keys: dict[str, tuple[int, float, int]] = {}
        self._waiting_in: dict[str, int] = {}  # queue: how many of its jobs wait
        self._wants: dict[str, dict[str, Counter[int]]] = {}  # queue: name: amounts waiting
        self._fresh: set[str] = set()  # waiting jobs no pass has looked at yet
        self._admitted: dict[str, _Admitted] = {}
        self._why: dict[str, Condition] = {}
        self._stopped_for: dict[str, str] = {}  # a stopped victim: the job it yields to
        self._victims: dict[str, int] = {}  # a preemptor: how many victims are still stopping
        self._nominated: set[str] = set()  # waiting jobs that preempted: they go first
        self._sequence = itertools.count()

    # -- jobs in and out ------------------------------------------------------

    def set_queue(self, queue: QueueSpec) -> None:
        self.quotas.set_queue(queue)

    def submit(self, job: GangJob) -> None:
        """Queue a job. Raises Unschedulable when it could never be admitted."""
        if job.id in self._keys or job.id in self._admitted:
            raise ValueError(f"job {job.id} is already known")
        self._check_possible(job)
        key = (-job.priority, job.order, next(self._sequence))
        bisect.insort(self._pending, (key, job))
        self._keys[job.id] = key
        self._waiting_in[job.queue] = self._waiting_in.get(job.queue, 0) + 1
        self._fresh.add(job.id)
        wants = self._wants.setdefault(job.queue, {})
        for name, amount in job.amounts:
            wants.setdefault(name, Counter())[amount] += 1

    def check(self, job: GangJob) -> None:
        """Raise Unschedulable if ``job`` could never be admitted; queue nothing.

        Safe to call from another thread while a pass runs: it reads only the nodes'
        capacities and the queues' configuration.
        """
        self._check_possible(job)

    def adopt(self, job: GangJob, allocations: Sequence[TaskAllocation]) -> None:
        """Count a job that already runs (found again after a restart) as admitted there."""
        self.cluster.restore(job.id, list(zip(job.tasks, allocations, strict=True)))
        self.quotas.use(job.queue, job.total)
        borrows = self.quotas.borrowing(job.queue)
        self._admitted[job.id] = _Admitted(job, borrows, next(self._sequence))

    def withdraw(self, job_id: str) -> bool:
        """Forget a waiting job (cancelled before it started); False if it is not waiting."""
        key = self._keys.pop(job_id, None)
        if key is None:
            return False
        index = bisect.bisect_left(self._pending, (key,))
        job = self._pending[index][1]
        del self._pending[index]
        self._waiting_in[job.queue] -= 1
        if not self._waiting_in[job.queue]:
            del self._waiting_in[job.queue]
        wants = self._wants[job.queue]
        for name, amount in job.amounts:
            wants[name][amount] -= 1
            if not wants[name][amount]:
                del wants[name][amount]
        self._why.pop(job_id, None)
        self._fresh.discard(job_id)
        self._stopped_for.pop(job_id, None)
        self._nominated.discard(job_id)
        return True

    def finished(self, job_id: str) -> None:
        """An admitted job has ended (or stopped): give its resources back.

        A job stopped by preemption goes back to the queue, in its old place.
        """
        admitted = self._admitted.pop(job_id, None)
        if admitted is None:
            self.withdraw(job_id)
            return
        if admitted.stopping_for is not None:
            left = self._victims.pop(admitted.stopping_for) - 1
            if left:
                self._victims[admitted.stopping_for] = left
        self.cluster.release(job_id)
        self.quotas.give_back(admitted.job.queue, admitted.job.total)
        if admitted.stopping_for is not None:
            self.submit(admitted.job)
            self._stopped_for[job_id] = admitted.stopping_for

    def requeue(self, job_id: str) -> None:
        """An admitted job could not be started (its launch failed for a reason that may
        pass): give back what it holds and let it wait again, in its old place."""
        admitted = self._admitted.get(job_id)
        if admitted is None or admitted.stopping_for is not None:
            self.finished(job_id)  # a victim already: it waits again as a stopped one
            return
        del self._admitted[job_id]
        self.cluster.release(job_id)
        self.quotas.give_back(admitted.job.queue, admitted.job.total)
        self.submit(admitted.job)

    # -- what is where --------------------------------------------------------

    def pending(self, limit: int | None = None) -> list[str]:
        """Waiting jobs (the first ``limit``), in the order they will be considered."""
        return [job.id for _, job in self._pending[:limit]]

    def admitted(self) -> list[str]:
        return list(self._admitted)

    def pending_by_queue(self) -> dict[str, list[str]]:
        """Waiting jobs of each queue, in order."""
        found: dict[str, list[str]] = {}
        for _, job in self._pending:
            found.setdefault(job.queue, []).append(job.id)
        return found

    def admitted_by_queue(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for admitted in self._admitted.values():
            found.setdefault(admitted.job.queue, []).append(admitted.job.id)
        return found

    def waiting(self, job_id: str) -> Condition | None:
        """Why a waiting job has not started (None when it is not waiting)."""
        if job_id not in self._keys:
            return None
        if job_id in self._why:
            return self._why[job_id]
        ahead = bisect.bisect_left(self._pending, (self._keys[job_id],))
        return Condition(Code.WAITING_FOR_TURN, f"waiting for its turn: {ahead} job(s) ahead of it")

    def would_start(self, job: GangJob) -> Condition | None:
        """None where ``job`` (not submitted) would be admitted now, at the back of its
        queue, without preempting anyone; else why it would wait. Unschedulable where it
        never could. Changes nothing."""
        self._check_possible(job)
        quota = self.quotas.check(job.queue, job.total)
        if not quota.fits:
            return Condition(Code.WAITING_FOR_QUOTA, f"waiting for quota: {quota.reason}")
        ahead = len(self.pending_by_queue().get(job.queue, []))
        if ahead:
            return Condition(
                Code.WAITING_FOR_TURN, f"waiting for its turn: {ahead} job(s) ahead of it"
            )
        if self.cluster.place(job.id, job.tasks) is None:
            return self._capacity_reason(job, None, Resources())
        self.cluster.release(job.id)
        return None

    def waiting_reason(self, job_id: str) -> str | None:
        """The message of ``waiting``."""
        condition = self.waiting(job_id)
        return None if condition is None else condition.message

    # -- the pass -------------------------------------------------------------

    def schedule(self) -> Decisions:
        """Admit what can start now; preempt what must make room. One pass."""
        decisions = Decisions()
        nominated = sorted((self._keys[job_id], job_id) for job_id in self._nominated)
        holding: list[GangJob] = []
        head: GangJob | None = None  # the first job waiting for capacity: it reserves
        reserved = Resources()
        queues_blocked: set[str] = set()
        queues_seen: set[str] = set()
        done: set[str] = set()  # queues whose other jobs this pass need not look at
        over_quota: dict[tuple[str, tuple[tuple[str, int], ...]], Condition] = {}
        for_capacity = 0  # jobs looked at that wait for capacity: at most backfill_depth
        for_quota: Counter[str] = Counter()  # by queue, those that wait for its quota
        for ahead, job in self._waiting():
            while nominated and -nominated[0][0][0] >= job.priority:  # its band's first
                served = self._job(nominated.pop(0)[1])
                queues_seen.add(served.queue)  # its queue had its chance
                holding += self._serve_nominated(served.id, decisions)
            if for_capacity >= self.backfill_depth:
                done |= queues_seen
            if done and self._waiting_in.keys() <= done:
                break
            if job.id in self._nominated or job.id not in self._keys or job.queue in done:
                continue  # served at the head of its priority, or its queue is done
            preemptor = self._stopped_for.get(job.id)
            if preemptor in self._keys:
                self._why[job.id] = Condition(
                    Code.WAITING_FOR_RESOURCES, f"preempted for {preemptor}, which starts first"
                )
                decisions.waiting.append(job.id)
                continue
            queues_seen.add(job.queue)
            if for_capacity >= self.backfill_depth:
                done.add(job.queue)  # deep enough: only the heads of the other queues
            known = over_quota.get((job.queue, job.amounts))
            if known is not None:  # what the queue uses only grows during a pass
                self._why[job.id] = known
                decisions.waiting.append(job.id)
                for_quota[job.queue] += 1
                if for_quota[job.queue] >= self.backfill_depth:
                    done.add(job.queue)
                continue
            decisions.considered += 1
            check = self.quotas.check(job.queue, job.total)
            allocations = self.cluster.place(job.id, job.tasks) if check.fits else None
            if allocations is not None:
                self._admit(job, check.borrows, allocations, decisions)
                continue
            decisions.waiting.append(job.id)
            if check.fits:
                for_capacity += 1
                self._why[job.id] = self._capacity_reason(job, head, reserved)
            else:
                self._why[job.id] = _over_quota(check.reason)
                for_quota[job.queue] += 1
                if for_quota[job.queue] >= self.backfill_depth or self._over_quota_all(job.queue):
                    done.add(job.queue)
            if job.queue not in queues_blocked:  # its queue's first: it may preempt...
                queues_blocked.add(job.queue)
                # ...when it is among the first backfill_depth jobs, as every job was that a
                # pass looked at before it looked at each queue: reclaims stay as rare.
                if ahead < self.backfill_depth and not self._awaits_victims(job):
                    decisions.preempted += self._preempt_for(job)
            if not check.fits and job.id not in self._nominated:
                over_quota[job.queue, job.amounts] = self._why[job.id]
            if head is None and check.fits:
                head = job
                self.cluster.reserve(RESERVED, job.tasks)
                reserved = total(task.resources for task, _ in self.cluster.holding(RESERVED))
        for _, job_id in nominated:  # after every job looked at
            if job_id in self._keys:
                holding += self._serve_nominated(job_id, decisions)
        self._fresh.difference_update(decisions.waiting)
        for job_id in sorted(self._fresh, key=self._keys.__getitem__):  # passed over
            job = self._job(job_id)
            if job.queue in for_quota:  # its queue has jobs over quota: is it one?
                check = self.quotas.check(job.queue, job.total)
                if not check.fits:
                    self._why[job_id] = _over_quota(check.reason)
                    decisions.passed_over.append(job_id)
        self._fresh.clear()
        self.cluster.release(RESERVED)
        for job in holding:
            self.cluster.release(_hold(job))
            self.quotas.give_back(job.queue, job.total)
        return decisions

    def _over_quota_all(self, queue: str) -> bool:
        """Whether every waiting job of ``queue`` is now over its quota: all of them ask
        for at least some amount of one resource, and that amount alone is over it."""
        count, wants = self._waiting_in.get(queue, 0), self._wants.get(queue, {})
        for name in self.quotas.queues[queue].nominal:
            amounts = wants.get(name)
            if not amounts or amounts.total() < count:
                continue  # a job that asks for none of it is never over its quota
            if not self.quotas.check(queue, Resources.of({name: min(amounts)})).fits:
                return True
        return False

    def _serve_nominated(self, job_id: str, decisions: Decisions) -> list[GangJob]:
        """Admit a nominated job if it fits; otherwise it holds, for the rest of the pass,
        the capacity it could use now and its quota. Returns it when it holds."""
        job = self._job(job_id)
        decisions.considered += 1
        decisions.waiting.append(job_id)  # taken out again below if it is admitted
        check = self.quotas.check(job.queue, job.total)
        allocations = self.cluster.place(job.id, job.tasks) if check.fits else None
        if allocations is not None:
            decisions.waiting.pop()
            self._admit(job, check.borrows, allocations, decisions)
            return []
        if self._awaits_victims(job):
            pass  # the reason says which jobs it waits for (see _preempt_for)
        elif check.fits:
            self._why[job.id] = self._capacity_reason(job, None, Resources())
        else:
            self._why[job.id] = _over_quota(check.reason)
        self.cluster.reserve(_hold(job), job.tasks)
        self.quotas.use(job.queue, job.total)
        return [job]

    def _job(self, job_id: str) -> GangJob:
        """A waiting job."""
        return self._pending[bisect.bisect_left(self._pending, (self._keys[job_id],))][1]

    def _waiting(self) -> Iterator[tuple[int, GangJob]]:
        """The waiting jobs in order, as a copy of the list would give them (without one),
        while the caller removes at most the job it was just given (admits it); each with
        how many jobs wait ahead of it."""
        index = 0
        while index < len(self._pending):
            key, job = self._pending[index]
            yield index, job
            if index < len(self._pending) and self._pending[index][0] == key:
                index += 1  # still waiting: on to the next; otherwise the next moved here

    def _admit(
        self,
        job: GangJob,
        borrows: bool,
        allocations: list[TaskAllocation],
        decisions: Decisions,
    ) -> None:
        self.withdraw(job.id)
        self.quotas.use(job.queue, job.total)
        self._admitted[job.id] = _Admitted(job, borrows, next(self._sequence))
        decisions.admitted.append(Admission(job.id, tuple(allocations)))

    def _capacity_reason(
        self, job: GangJob, head: GangJob | None, reserved: Resources
    ) -> Condition:
        short = job.total.shortfall(self.cluster.free)
        if head is not None and not job.total.shortfall(self.cluster.free + reserved):
            message = f"waiting for resources held for {head.id}, which is ahead of it"
        elif short:
            wants = ", ".join(describe(name, job.total.get(name)) for name in short)
            free = ", ".join(describe(name, self.cluster.free.get(name)) for name in short)
            message = f"waiting for resources: needs {wants}; free now {free}"
        else:
            message = (
                "waiting for resources: enough is free in all, but not on nodes that fit its tasks"
            )
        return Condition(Code.WAITING_FOR_RESOURCES, message)

    # -- preemption -----------------------------------------------------------

    def _awaits_victims(self, job: GangJob) -> bool:
        return job.id in self._victims

    def _preempt_for(self, job: GangJob) -> list[Preemption]:
        """Stop the fewest jobs that let ``job`` in, least valuable first; none if nothing does."""
        candidates = self._candidates(job)
        if not candidates:
            return []
        taken: list[tuple[_Admitted, list[tuple[TaskDemand, TaskAllocation]]]] = []
        for victim in candidates:
            taken.append((victim, self._take_away(victim)))
            if self._would_fit(job):
                break
        else:
            for victim, held in reversed(taken):
                self._put_back(victim, held)
            return []
        # Spare every victim that turns out not to be needed, most valuable first.
        needed = []
        for victim, held in reversed(taken):
            self._put_back(victim, held)
            if not self._would_fit(job):
                needed.append((victim, self._take_away(victim)))
        victims = [victim for victim, _ in needed]
        for victim, held in needed:  # they keep their resources until they have stopped
            self._put_back(victim, held)
        if victims:
            # It stops others now, so it yields to none: a job that once stopped for one
            # of its victims must not wait for that victim in turn (each would wait forever).
            self._stopped_for.pop(job.id, None)
            self._nominated.add(job.id)
            names = ", ".join(victim.job.id for victim in victims)
            self._why[job.id] = Condition(
                Code.WAITING_FOR_PREEMPTION, f"waiting for {names} to stop: preempted for it"
            )
        preemptions = []
        for victim in victims:
            victim.stopping_for = job.id
            self._victims[job.id] = self._victims.get(job.id, 0) + 1
            reason = f"{Reason.PREEMPTED} by {job.id} (priority {job.priority})"
            if victim.job.queue != job.queue:
                reason = (
                    f"{Reason.PREEMPTED}: queue {job.queue!r} reclaims the quota it lent "
                    f"to {victim.job.queue!r}"
                )
            preemptions.append(Preemption(victim.job.id, job.id, reason))
        return preemptions

    def _candidates(self, job: GangJob) -> list[_Admitted]:
        """Running jobs ``job`` may preempt, least valuable first."""
        queue = self.quotas.queues[job.queue]
        within_nominal = not self.quotas.check(job.queue, job.total).borrows
        found = []
        for admitted in self._admitted.values():
            if admitted.stopping_for is not None:
                continue
            other = admitted.job
            same_queue = other.queue == job.queue and other.priority < job.priority
            reclaim = (
                within_nominal
                and queue.cohort is not None
                and other.queue != job.queue
                and self.quotas.queues[other.queue].cohort == queue.cohort
                and admitted.borrows
                and self.quotas.borrowing(other.queue)  # it may have stopped borrowing since
            )
            if same_queue or reclaim:
                found.append(admitted)
        return sorted(found, key=lambda a: (not a.borrows, a.job.priority, -a.sequence))

    def _would_fit(self, job: GangJob) -> bool:
        if not self.quotas.check(job.queue, job.total).fits:
            return False
        if self.cluster.place(job.id, job.tasks) is None:
            return False
        self.cluster.release(job.id)
        return True

    def _take_away(self, victim: _Admitted) -> list[tuple[TaskDemand, TaskAllocation]]:
        held = self.cluster.holding(victim.job.id)
        self.cluster.release(victim.job.id)
        self.quotas.give_back(victim.job.queue, victim.job.total)
        return held

    def _put_back(self, victim: _Admitted, held: list[tuple[TaskDemand, TaskAllocation]]) -> None:
        self.cluster.restore(victim.job.id, held)
        self.quotas.use(victim.job.queue, victim.job.total)

    # -- submission checks ----------------------------------------------------

    def _check_possible(self, job: GangJob) -> None:
        if job.queue not in self.quotas.queues:
            known = ", ".join(sorted(self.quotas.queues))
            raise Unschedulable(f"no queue {job.queue!r} (queues: {known})")
        for task in job.tasks:
            if not self.cluster.fits_somewhere(task):
                raise Unschedulable(
                    "a task asks for "
                    + ", ".join(describe(n, a) for n, a in task.resources.items())
                    + " and no node has that much"
                )
        short = job.total.shortfall(self.cluster.capacity)
        if short:
            wants = ", ".join(describe(n, job.total.get(n)) for n in short)
            has = ", ".join(describe(n, self.cluster.capacity.get(n)) for n in short)
            raise Unschedulable(f"the job needs {wants} in all but the nodes have {has}")
        with self._empty_lock:
            fits = self._empty.place(job.id, job.tasks) is not None
            self._empty.release(job.id)
        if not fits:
            raise Unschedulable("its tasks do not fit on the nodes together, even all free")
        queue = self.quotas.queues[job.queue]
        for name, nominal in queue.nominal.items():
            limit = nominal
            if queue.cohort is not None:
                borrow = None if queue.borrowing_limit is None else queue.borrowing_limit.get(name)
                limit = self._cohort_nominal(queue.cohort, name)
                if borrow is not None:
                    limit = min(limit, nominal + borrow)
            if job.total.get(name) > limit:
                raise Unschedulable(
                    f"the job needs {describe(name, job.total.get(name))} but queue "
                    f"{job.queue!r} can never have more than {describe(name, limit)}"
                )

    def _cohort_nominal(self, cohort: str, name: str) -> int:
        return sum(
            queue.nominal.get(name, 0)
            for queue in list(self.quotas.queues.values())
            if queue.cohort == cohort
        )


def _over_quota(why: str) -> Condition:
    return Condition(Code.WAITING_FOR_QUOTA, f"waiting for quota: {why}")


def _hold(job: GangJob) -> str:
    """The holder name of what a nominated job holds during a pass."""
    return f"{RESERVED}:{job.id}"
