"""The Scheduler driven by random job streams, checked against an independent model."""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from trainfleet.scheduling.admission import Decisions, GangJob, Scheduler
from trainfleet.scheduling.cluster import Cluster, Node, TaskAllocation, TaskDemand
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.scheduling.queues import QueueSpec
from trainfleet.scheduling.resources import Resources

from .model import (
    all_queues,
    allocation_errors,
    amounts,
    node_free,
    node_lists,
    over_nominal,
    placeable,
    queue_specs,
    quota_violations,
    shared_clusters,
    task_demands,
    within_ceilings,
)

JobArgs = tuple[list[TaskDemand], int, int]
"""A job to submit: its tasks, its queue (an index into the sorted names), its priority."""


def job_batches(max_size: int = 3) -> st.SearchStrategy[list[JobArgs]]:
    job = st.tuples(
        st.lists(task_demands(), min_size=1, max_size=3), st.integers(0, 9), st.integers(0, 3)
    )
    return st.lists(job, min_size=1, max_size=max_size)


SETTINGS = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class SchedulerMachine(RuleBasedStateMachine):
    """Submit, schedule, finish (or stop), withdraw and drain at random; check every rule.

    The subclasses say how the nodes and queues are drawn.
    """

    def setup(
        self, nodes: list[Node], specs: list[QueueSpec], depth: int, jobs: list[JobArgs]
    ) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.queues = all_queues(specs)
        self.scheduler = Scheduler(nodes, specs, backfill_depth=depth)
        self.jobs: dict[str, GangJob] = {}
        self.running: dict[str, tuple[TaskAllocation, ...]] = {}
        self.stopping: set[str] = set()
        self.pending: set[str] = set()
        self.yields_to: dict[str, str] = {}
        self.nominated: set[str] = set()
        self.submitted = 0
        self.submit_all(jobs)

    # -- the model ------------------------------------------------------------

    def order(self) -> list[str]:
        """Pending jobs as they must be considered: priority, then submission order."""
        return sorted(self.pending, key=lambda i: (-self.jobs[i].priority, self.jobs[i].order))

    def usage(self) -> dict[str, Resources]:
        usage = {name: Resources() for name in self.queues}
        for job_id in self.running:
            job = self.jobs[job_id]
            usage[job.queue] = usage[job.queue] + job.total
        return usage

    def held(self) -> list[tuple[TaskDemand, TaskAllocation]]:
        return [
            (task, allocation)
            for job_id, allocations in self.running.items()
            for task, allocation in zip(self.jobs[job_id].tasks, allocations, strict=True)
        ]

    def finish(self, job_id: str) -> None:
        self.scheduler.finished(job_id)
        del self.running[job_id]
        if job_id in self.stopping:
            self.stopping.remove(job_id)
            self.pending.add(job_id)
            assert job_id in self.scheduler.pending(), f"stopped {job_id} not back in the queue"
        assert self.scheduler.cluster.held_by(job_id) == [], f"{job_id} still holds resources"

    def apply(self, decisions: Decisions, idle: bool, usage_before: dict[str, Resources]) -> None:
        """Record a pass's decisions, checking each against the rules."""
        ready = [i for i in self.order() if self.yields_to.get(i) not in self.pending]
        # A job that preempted goes first among the jobs of its priority.
        ready.sort(key=lambda i: (-self.jobs[i].priority, i not in self.nominated))
        head = ready[0] if ready else None
        # However deep one queue's backlog, each pass looks at a job of every queue.
        looked_at = {admission.job for admission in decisions.admitted} | set(decisions.waiting)
        for queue in {self.jobs[job_id].queue for job_id in ready}:
            assert any(self.jobs[job_id].queue == queue for job_id in looked_at), (
                f"no job of queue {queue} looked at"
            )
        for admission in decisions.admitted:
            assert admission.job in self.pending, f"{admission.job} admitted but not waiting"
            self.pending.remove(admission.job)
            self.yields_to.pop(admission.job, None)
            self.nominated.discard(admission.job)
            self.running[admission.job] = admission.allocations
            assert len(admission.allocations) == len(self.jobs[admission.job].tasks)
        usage = self.usage()
        for admission in decisions.admitted:
            queue = self.jobs[admission.job].queue
            borrowing = over_nominal(self.queues[queue], usage[queue])
            event("admitted, borrowing" if borrowing else "admitted")
        for preemption in decisions.preempted:
            victim, by = self.jobs[preemption.job], self.jobs[preemption.by]
            assert victim.id in self.running and victim.id not in self.stopping
            assert by.id in self.pending, f"{by.id} preempts but is not waiting"
            if victim.queue == by.queue:
                assert victim.priority < by.priority, f"{by.id} preempts an equal: {victim.id}"
            else:
                spec = self.queues[by.queue]
                assert spec.cohort is not None
                assert self.queues[victim.queue].cohort == spec.cohort, "reclaim across cohorts"
                assert over_nominal(self.queues[victim.queue], usage[victim.queue]), (
                    f"{by.id} reclaims from {victim.queue}, which does not borrow"
                )
                after = usage_before[by.queue] + by.total
                assert not any(
                    by.total.get(name) and after.get(name) > nominal
                    for name, nominal in spec.nominal.items()
                ), f"{by.id} reclaims but would borrow"
            self.stopping.add(victim.id)
            self.yields_to[victim.id] = by.id
            self.nominated.add(by.id)
            event("preempted in queue" if victim.queue == by.queue else "reclaimed in cohort")
        if idle and head is not None:
            admitted = [admission.job for admission in decisions.admitted]
            assert head in admitted, f"idle cluster, yet the first job {head} waits"

    def schedule_once(self) -> None:
        idle, usage = not self.running, self.usage()
        self.apply(self.scheduler.schedule(), idle, usage)
        self.check()

    # -- rules ----------------------------------------------------------------

    @rule(jobs=job_batches(), then_schedule=st.booleans())
    def submit(self, jobs: list[JobArgs], then_schedule: bool) -> None:
        """Submit refuses the jobs that can never run, and only those the packer cannot place."""
        self.submit_all(jobs)
        if then_schedule:
            self.schedule_once()

    def submit_all(self, jobs: list[JobArgs]) -> None:
        names = sorted(self.queues)
        for tasks, queue, priority in jobs:
            self.submitted += 1
            job = GangJob(
                f"j{self.submitted}",
                tuple(tasks),
                names[queue % len(names)],
                priority,
                float(self.submitted),
            )
            possible = placeable(list(self.nodes.values()), tasks) and within_ceilings(
                self.queues, job.queue, job.total
            )
            try:
                self.scheduler.submit(job)
            except Unschedulable:
                greedy = Cluster(list(self.nodes.values())).place(job.id, job.tasks)
                assert not possible or greedy is None, f"{job} can run, yet was refused"
                continue
            assert possible, f"{job} can never run, yet was accepted"
            event("accepted")
            self.jobs[job.id] = job
            self.pending.add(job.id)

    @rule()
    def schedule(self) -> None:
        """A pass admits only waiting jobs and preempts only by the rules (see ``apply``)."""
        self.schedule_once()

    @rule(pick=st.integers(0, 99), then_schedule=st.booleans())
    def finish_one(self, pick: int, then_schedule: bool) -> None:
        """A running job ends, or a preempted one has stopped."""
        if self.running:
            running = sorted(self.running)
            self.finish(running[pick % len(running)])
        if then_schedule:
            self.schedule_once()

    @rule(pick=st.integers(0, 99))
    def withdraw(self, pick: int) -> None:
        """Withdraw forgets a waiting job, and nothing else."""
        known = sorted(self.jobs) or ["nobody"]
        job_id = known[pick % len(known)]
        waiting = job_id in self.pending
        assert self.scheduler.withdraw(job_id) == waiting
        if waiting:
            self.pending.remove(job_id)
            self.nominated.discard(job_id)
            assert self.scheduler.waiting_reason(job_id) is None

    @rule()
    def drain(self) -> None:
        """Everything running ends; repeated passes then admit every waiting job."""
        for _ in range(3 * len(self.pending) + 3):
            if not self.pending and not self.running:
                break
            for job_id in sorted(self.running):
                self.finish(job_id)
            self.schedule_once()
        assert not self.pending, f"starved: {self.order()}"

    # -- invariants -----------------------------------------------------------

    @invariant()
    def check(self) -> None:
        """Nothing overcommitted, all-or-nothing, quotas kept; the scheduler agrees."""
        scheduler = self.scheduler
        held = self.held()
        errors = allocation_errors(self.nodes, held)
        assert not errors, errors
        violations = quota_violations(self.queues, self.usage())
        assert not violations, violations
        assert set(scheduler.admitted()) == set(self.running)
        assert scheduler.pending() == self.order()
        assert set(scheduler.cluster.holders()) == set(self.running)
        for job_id, allocations in self.running.items():
            assert scheduler.cluster.held_by(job_id) == list(allocations)
        for job_id in self.pending:
            assert scheduler.cluster.held_by(job_id) == []
            assert scheduler.waiting_reason(job_id)
        for node in self.nodes.values():
            free, devices = scheduler.cluster.node_free(node.name)
            assert (amounts(free), devices) == node_free(node, held)
        for name, used in self.usage().items():
            assert amounts(scheduler.quotas.usage.get(name, Resources())) == amounts(used)


class RandomQueuesMachine(SchedulerMachine):
    """Random nodes, and random queues: with and without cohort, quotas or borrowing limits."""

    @initialize(
        nodes=node_lists(),
        specs=queue_specs(),
        depth=st.sampled_from([1, 2, 64]),
        jobs=job_batches(max_size=6),
    )
    def start(
        self, nodes: list[Node], specs: list[QueueSpec], depth: int, jobs: list[JobArgs]
    ) -> None:
        self.setup(nodes, specs, depth, jobs)


class SharedClusterMachine(SchedulerMachine):
    """Queues that split the cluster between them: quotas bind, jobs borrow and reclaim."""

    @initialize(setup=shared_clusters(), depth=st.sampled_from([1, 2, 64]), jobs=job_batches(6))
    def start(
        self, setup: tuple[list[Node], list[QueueSpec]], depth: int, jobs: list[JobArgs]
    ) -> None:
        self.setup(*setup, depth, jobs)


RandomQueuesMachine.TestCase.settings = SETTINGS
SharedClusterMachine.TestCase.settings = SETTINGS
TestRandomQueues = RandomQueuesMachine.TestCase
TestSharedCluster = SharedClusterMachine.TestCase


class WholeMachine(RuleBasedStateMachine):
    """Jobs of one queue that each need every node: one at a time, best first."""

    @initialize(nodes=node_lists(max_nodes=3))
    def start(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.scheduler = Scheduler(nodes)
        self.jobs: dict[str, GangJob] = {}
        self.pending: set[str] = set()
        self.running: str | None = None
        self.stopping = False
        self.submitted = 0

    def best(self) -> str:
        return min(self.pending, key=lambda i: (-self.jobs[i].priority, self.jobs[i].order))

    @rule(priority=st.integers(0, 3))
    def submit(self, priority: int) -> None:
        self.submitted += 1
        tasks = tuple(
            TaskDemand(node.capacity, {"node": node.labels["node"]}) for node in self.nodes
        )
        job = GangJob(f"j{self.submitted}", tasks, priority=priority, order=self.submitted)
        self.scheduler.submit(job)
        self.jobs[job.id] = job
        self.pending.add(job.id)

    @rule()
    def schedule(self) -> None:
        """A pass admits the best waiting job when the machine is free, else preempts."""
        best = self.best() if self.pending else None
        decisions = self.scheduler.schedule()
        admitted = [admission.job for admission in decisions.admitted]
        if self.running is None and best is not None:
            assert admitted == [best], f"admitted {admitted}, expected {best}"
            self.pending.remove(best)
            self.running = best
            return
        assert admitted == []
        victims = [(p.job, p.by) for p in decisions.preempted]
        if (
            best is not None
            and self.running is not None
            and not self.stopping
            and self.jobs[best].priority > self.jobs[self.running].priority
        ):
            assert victims == [(self.running, best)]
            self.stopping = True
        else:
            assert victims == []

    @rule()
    def finish(self) -> None:
        """The running job ends; a preempted one goes back to its old place."""
        if self.running is None:
            return
        self.scheduler.finished(self.running)
        if self.stopping:
            self.pending.add(self.running)
        self.running, self.stopping = None, False

    @invariant()
    def agrees(self) -> None:
        order = sorted(self.pending, key=lambda i: (-self.jobs[i].priority, self.jobs[i].order))
        assert self.scheduler.pending() == order
        assert self.scheduler.admitted() == ([self.running] if self.running else [])


WholeMachine.TestCase.settings = settings(SETTINGS, max_examples=100, stateful_step_count=30)
TestWholeMachine = WholeMachine.TestCase
