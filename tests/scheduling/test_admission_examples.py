"""The Scheduler on small hand-made cases: gangs, backfill, preemption, reasons, refusals."""

from __future__ import annotations

import pytest

from trainfleet.domain.conditions import Code, Condition
from trainfleet.scheduling.admission import GangJob, Scheduler
from trainfleet.scheduling.cluster import Node, TaskAllocation, TaskDemand
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.scheduling.queues import QueueSpec

from .model import COHORT, GI, demand, node


def job(
    job_id: str,
    *tasks: TaskDemand,
    queue: str = "default",
    priority: int = 0,
    order: float = 0.0,
) -> GangJob:
    return GangJob(job_id, tasks, queue, priority, order)


def admitted(scheduler: Scheduler) -> list[str]:
    """Run one pass; the ids it admitted."""
    return [admission.job for admission in scheduler.schedule().admitted]


def two_nodes() -> list[Node]:
    return [node("n0", cpu=4000, gpus=2), node("n1", cpu=4000, gpus=2)]


def test_two_whole_machine_jobs_never_each_get_half() -> None:
    """Two gangs that each need every GPU: one runs whole, the other holds nothing."""
    scheduler = Scheduler(two_nodes())
    scheduler.submit(job("a", *[demand(gpu=1000)] * 4, order=1))
    scheduler.submit(job("b", *[demand(gpu=1000)] * 4, order=2))
    decisions = scheduler.schedule()
    assert [admission.job for admission in decisions.admitted] == ["a"]
    assert len(decisions.admitted[0].allocations) == 4
    assert scheduler.cluster.held_by("b") == []
    assert scheduler.cluster.holders() == ["a"]
    scheduler.finished("a")
    assert admitted(scheduler) == ["b"]


def test_backfill_uses_only_what_the_head_does_not_reserve() -> None:
    """A small job starts ahead of a blocked big head only outside the head's reservation."""
    nodes = [node("n0"), node("n1"), node("small", cpu=2000, labels={"kind": "small"})]
    scheduler = Scheduler(nodes)
    scheduler.submit(job("running", demand(cpu=4000), order=0))
    assert admitted(scheduler) == ["running"]
    scheduler.submit(job("head", demand(cpu=4000), demand(cpu=4000), order=1))
    scheduler.submit(job("too-big", demand(cpu=3000), order=2))
    scheduler.submit(job("fits-aside", demand(cpu=2000), order=3))
    assert admitted(scheduler) == ["fits-aside"]
    assert scheduler.cluster.held_by("fits-aside")[0].node == "small"
    reason = scheduler.waiting_reason("too-big")
    assert reason == "waiting for resources held for head, which is ahead of it"
    scheduler.finished("running")
    assert admitted(scheduler) == ["head"]


def test_preemption_stops_only_lower_priority_jobs_of_the_same_queue() -> None:
    """A high-priority job stops a lower one of its queue, never one of another queue."""
    queues = [QueueSpec("other")]
    scheduler = Scheduler([node("n", gpus=1)], queues)
    scheduler.submit(job("low", demand(gpu=1000), priority=0))
    assert admitted(scheduler) == ["low"]
    scheduler.submit(job("equal", demand(gpu=1000), priority=0, order=1))
    scheduler.submit(job("high-other", demand(gpu=1000), queue="other", priority=1))
    assert scheduler.schedule().preempted == []
    scheduler.submit(job("high", demand(gpu=1000), priority=2, order=2))
    decisions = scheduler.schedule()
    assert [(p.job, p.by) for p in decisions.preempted] == [("low", "high")]
    assert decisions.preempted[0].reason == "preempted by high (priority 2)"
    assert decisions.admitted == []
    assert scheduler.schedule().preempted == []
    scheduler.finished("low")
    assert "low" in scheduler.pending()
    assert admitted(scheduler) == ["high"]


def cohort_scheduler(capacity: int = 4000) -> Scheduler:
    queues = [QueueSpec("a", {"cpu": 2000}, COHORT), QueueSpec("b", {"cpu": 2000}, COHORT)]
    return Scheduler([node("n", cpu=capacity)], queues)


def test_reclaim_stops_the_borrowing_job_and_its_queue_waits() -> None:
    """A queue within its nominal quota reclaims from the job that borrows it, only that one;
    the stopped job does not start again before the job it was stopped for."""
    scheduler = cohort_scheduler()
    scheduler.submit(job("b-own", demand(cpu=2000), queue="b", priority=5, order=1))
    scheduler.submit(job("b-borrows", demand(cpu=2000), queue="b", priority=5, order=2))
    assert admitted(scheduler) == ["b-own", "b-borrows"]
    assert scheduler.quotas.borrowing("b")
    scheduler.submit(job("a-own", demand(cpu=2000), queue="a", priority=0, order=3))
    decisions = scheduler.schedule()
    assert [(p.job, p.by) for p in decisions.preempted] == [("b-borrows", "a-own")]
    assert decisions.preempted[0].reason == "preempted: queue 'a' reclaims the quota it lent to 'b'"
    assert scheduler.waiting("a-own") == Condition(
        Code.WAITING_FOR_PREEMPTION, "waiting for b-borrows to stop: preempted for it"
    )
    scheduler.finished("b-borrows")
    assert scheduler.pending() == ["b-borrows", "a-own"]
    assert admitted(scheduler) == ["a-own"]
    assert scheduler.schedule().preempted == []
    assert "waiting for quota" in (scheduler.waiting_reason("b-borrows") or "")
    assert getattr(scheduler.waiting("b-borrows"), "code", None) is Code.WAITING_FOR_QUOTA


def test_what_a_reclaim_frees_goes_to_the_job_that_reclaimed() -> None:
    """An older waiting job of a third queue, borrowing, must not take what the victims
    free before the reclaiming job starts (else it preempts again and again)."""
    queues = [
        QueueSpec("a", {"cpu": 2000}, COHORT),
        QueueSpec("b", {"cpu": 2000}, COHORT),
        QueueSpec("c", {"cpu": 0}, COHORT),
    ]
    scheduler = Scheduler([node("n", cpu=4000)], queues)
    scheduler.submit(job("b-all", demand(cpu=4000), queue="b", order=1))
    assert admitted(scheduler) == ["b-all"]
    scheduler.submit(job("c-all", demand(cpu=4000), queue="c", order=2))
    scheduler.submit(job("a-half", demand(cpu=2000), queue="a", order=3))
    decisions = scheduler.schedule()
    assert [(p.job, p.by) for p in decisions.preempted] == [("b-all", "a-half")]
    assert scheduler.waiting_reason("a-half") == "waiting for b-all to stop: preempted for it"
    scheduler.finished("b-all")
    decisions = scheduler.schedule()
    assert [admission.job for admission in decisions.admitted] == ["a-half"]
    assert decisions.preempted == []
    assert "waiting for quota" in (scheduler.waiting_reason("c-all") or "")


def test_no_reclaim_from_a_queue_that_no_longer_borrows() -> None:
    """A job admitted while its queue borrowed is safe once its queue is back within nominal."""
    scheduler = Scheduler(
        [node("n", cpu=4000)],
        [QueueSpec("a", {"cpu": 2000}, COHORT), QueueSpec("b", {"cpu": 2000}, COHORT)],
    )
    scheduler.submit(job("b-own", demand(cpu=2000), queue="b", order=1))
    scheduler.submit(job("b-borrows", demand(cpu=1000), queue="b", order=2))
    assert admitted(scheduler) == ["b-own", "b-borrows"]
    scheduler.finished("b-own")
    assert not scheduler.quotas.borrowing("b")
    scheduler.submit(job("other", demand(cpu=1500), order=3))
    scheduler.submit(job("a-own", demand(cpu=2000), queue="a", order=4))
    decisions = scheduler.schedule()
    assert [admission.job for admission in decisions.admitted] == ["other"]
    assert decisions.preempted == []


def test_fractional_gpus_share_a_device_but_never_with_a_whole_gpu() -> None:
    """Two 0.5 GPU jobs share the one device; a whole-GPU job waits until both end."""
    scheduler = Scheduler([node("n", gpus=1)])
    scheduler.submit(job("half-1", demand(gpu=500), order=1))
    scheduler.submit(job("half-2", demand(gpu=500), order=2))
    scheduler.submit(job("whole", demand(gpu=1000), order=3))
    decisions = scheduler.schedule()
    assert [admission.job for admission in decisions.admitted] == ["half-1", "half-2"]
    assert {admission.allocations for admission in decisions.admitted} == {
        (TaskAllocation("n", (0,), 500),)
    }
    assert "gpu 1" in (scheduler.waiting_reason("whole") or "")
    scheduler.finished("half-1")
    assert admitted(scheduler) == []
    scheduler.finished("half-2")
    assert admitted(scheduler) == ["whole"]
    scheduler.submit(job("half-3", demand(gpu=500), order=4))
    assert admitted(scheduler) == []


def test_waiting_reason_names_the_resource_or_the_quota() -> None:
    """A waiting job says what it lacks: which resource, or which queue's quota."""
    scheduler = Scheduler(
        [node("n", cpu=4000, memory=8 * GI, gpus=1)], [QueueSpec("solo", {"cpu": 2000})]
    )
    scheduler.submit(job("gpu-user", demand(gpu=1000), order=1))
    scheduler.submit(job("quota-1", demand(cpu=2000), queue="solo", order=2))
    scheduler.submit(job("quota-2", demand(cpu=1000), queue="solo", order=3))
    scheduler.submit(job("gpu-wanter", demand(gpu=1000), order=4))
    assert scheduler.waiting("quota-2") == Condition(
        Code.WAITING_FOR_TURN, "waiting for its turn: 2 job(s) ahead of it"
    )
    assert admitted(scheduler) == ["gpu-user", "quota-1"]
    assert getattr(scheduler.waiting("quota-2"), "code", None) is Code.WAITING_FOR_QUOTA
    assert getattr(scheduler.waiting("gpu-wanter"), "code", None) is Code.WAITING_FOR_RESOURCES
    assert scheduler.waiting_reason("quota-2") == (
        "waiting for quota: queue 'solo' has a nominal quota of cpu 2, uses cpu 2 and the job "
        "needs cpu 1; it has no cohort to borrow from"
    )
    assert scheduler.waiting_reason("gpu-wanter") == (
        "waiting for resources: needs gpu 1; free now gpu 0"
    )
    assert scheduler.waiting_reason("gpu-user") is None


@pytest.mark.parametrize(
    ("tasks", "queue", "message"),
    [
        ([demand(cpu=8000)], "default", "a task asks for cpu 8 and no node has that much"),
        ([demand(gpu=3000)], "default", "a task asks for gpu 3 and no node has that much"),
        ([demand(cpu=4000)] * 3, "default", "the job needs cpu 12 in all but the nodes have cpu 8"),
        (
            [demand(cpu=2500)] * 3,
            "default",
            "its tasks do not fit on the nodes together, even all free",
        ),
        (
            [demand(cpu=3000)],
            "solo",
            "the job needs cpu 3 but queue 'solo' can never have more than cpu 2",
        ),
        (
            [demand(cpu=3000)],
            "a",
            "the job needs cpu 3 but queue 'a' can never have more than cpu 2.5",
        ),
        ([demand(cpu=1000)], "nowhere", "no queue 'nowhere'"),
    ],
)
def test_submit_refuses_what_can_never_run(
    tasks: list[TaskDemand], queue: str, message: str
) -> None:
    """Too big for any node, for the cluster, for the nodes together, or for its queue."""
    queues = [
        QueueSpec("solo", {"cpu": 2000}),
        QueueSpec("a", {"cpu": 2000}, COHORT, {"cpu": 4000}),
        QueueSpec("b", {"cpu": 500}, COHORT),
    ]
    nodes = [node("n0", gpus=2, licence=1), node("n1", gpus=2)]
    scheduler = Scheduler(nodes, queues)
    with pytest.raises(Unschedulable, match="^" + message.replace("(", r"\(")):
        scheduler.submit(job("j", *tasks, queue=queue))
    assert scheduler.pending() == []


def test_priority_then_submission_order() -> None:
    """Jobs that each need the whole cluster run best priority first, then oldest first."""
    scheduler = Scheduler(two_nodes())
    whole = [demand(cpu=4000, gpu=2000)] * 2
    for job_id, priority, order in [("p0", 0, 1), ("p2-late", 2, 3), ("p2", 2, 2), ("p1", 1, 0)]:
        scheduler.submit(job(job_id, *whole, priority=priority, order=order))
    ran = []
    while scheduler.pending():
        (started,) = admitted(scheduler)
        ran.append(started)
        scheduler.finished(started)
    assert ran == ["p2", "p2-late", "p1", "p0"]


def test_jobs_over_their_queues_quota_leave_other_queues_their_chance() -> None:
    """64 jobs blocked on one queue's quota (the default backfill depth) ahead of a job of
    another queue: that job starts on the idle node, and every waiting job says why."""
    scheduler = Scheduler([node("n", cpu=8000)], [QueueSpec("capped", {"cpu": 1000})])
    for i in range(65):
        scheduler.submit(job(f"capped{i}", demand(cpu=1000), queue="capped", order=i))
    scheduler.submit(job("other", demand(cpu=1000), order=100))
    decisions = scheduler.schedule()
    assert [admission.job for admission in decisions.admitted] == ["capped0", "other"]
    assert decisions.waiting + decisions.passed_over == [f"capped{i}" for i in range(1, 65)]
    for i in range(1, 65):
        reason = scheduler.waiting_reason(f"capped{i}")
        assert reason is not None and reason.startswith("waiting for quota: queue 'capped'")


def test_a_deep_backlog_of_one_queue_leaves_the_head_of_another_its_chance() -> None:
    """Past ``backfill_depth`` jobs waiting for capacity, a pass still looks at the first
    job of each queue it has not looked at, within what the blocked head leaves free."""
    nodes = [node("big", cpu=4000), node("small", cpu=1000, labels={"kind": "small"})]
    scheduler = Scheduler(nodes, [QueueSpec("team")], backfill_depth=2)
    scheduler.submit(job("running", demand(cpu=4000), order=0))
    assert admitted(scheduler) == ["running"]
    for i in range(5):
        scheduler.submit(job(f"big{i}", demand(cpu=4000), order=1 + i))
    scheduler.submit(job("team-head", demand(cpu=1000), queue="team", order=10))
    scheduler.submit(job("team-second", demand(cpu=1000), queue="team", order=11))
    decisions = scheduler.schedule()
    assert [admission.job for admission in decisions.admitted] == ["team-head"]
    assert scheduler.cluster.held_by("team-head")[0].node == "small"
    assert scheduler.waiting_reason("big2") == "waiting for its turn: 2 job(s) ahead of it"
    again = scheduler.schedule()  # no new job: the pass looks at the queues' heads only
    assert again.waiting == ["big0", "big1", "team-second"], "a backlog is cut at depth 2"
    scheduler.finished("running")
    assert admitted(scheduler) == ["big0"]
