"""QuotaBook: nominal quotas, cohorts, borrowing limits, and the reasons it gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trainfleet.scheduling.queues import QueueSpec, QuotaBook
from trainfleet.scheduling.resources import Resources

from .model import COHORT, LICENCE, NAMES, all_queues, queue_specs, quota_violations

DEMANDS = st.builds(
    Resources,
    cpu=st.sampled_from([0, 500, 1000, 2000, 4000]),
    gpu=st.sampled_from([0, 250, 1000, 2000]),
    custom=st.sampled_from([{}, {LICENCE: 1}]),
)
Step = tuple[int, Resources, int]
STEPS = st.lists(st.tuples(st.integers(0, 9), DEMANDS, st.integers(0, 9)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(specs=queue_specs(), steps=STEPS)
def test_check_admits_exactly_what_keeps_every_limit(
    specs: list[QueueSpec], steps: list[Step]
) -> None:
    """A demand fits iff using it keeps its queue and cohort within their limits.

    ``borrows`` says whether it takes the queue over nominal; a refusal names the resource.
    """
    queues = all_queues(specs)
    names = sorted(queues)
    book = QuotaBook(specs)
    running: list[tuple[str, Resources]] = []
    for queue_index, demand, finish in steps:
        if running and finish % 3 == 0:
            queue, done = running.pop(finish % len(running))
            book.give_back(queue, done)
        queue = names[queue_index % len(names)]
        usage = {name: book.usage.get(name, Resources()) for name in queues}
        after = usage | {queue: usage[queue] + demand}
        broken = quota_violations(queues, after)
        check = book.check(queue, demand)
        assert check.fits == (not broken), (queue, demand, usage, broken, check)
        nominal = queues[queue].nominal
        over = [n for n in nominal if demand.get(n) and after[queue].get(n) > nominal[n]]
        assert check.borrows == bool(over)
        if check.fits:
            book.use(queue, demand)
            running.append((queue, demand))
            assert not quota_violations(queues, book.usage)
        else:
            assert any(name in check.reason for name in NAMES if demand.get(name)), check.reason


def test_queue_without_cohort_never_borrows() -> None:
    """A queue alone gets its nominal quota and not a millicore more."""
    book = QuotaBook([QueueSpec("solo", {"cpu": 2000})])
    assert book.check("solo", Resources(cpu=2000)).fits
    book.use("solo", Resources(cpu=1500))
    check = book.check("solo", Resources(cpu=1000))
    assert not check.fits
    assert "no cohort" in check.reason and "cpu 2" in check.reason


def test_unnamed_resources_are_not_limited() -> None:
    """A queue limits only what it names: GPUs are free for a CPU-only quota."""
    book = QuotaBook([QueueSpec("cpu-only", {"cpu": 1000})])
    assert book.check("cpu-only", Resources(cpu=1000, gpu=8000)).fits
    assert book.check("default", Resources(cpu=10**9, gpu=10**9)).fits


def test_borrowing_within_limit_and_cohort() -> None:
    """A queue borrows what its cohort leaves unused, up to its borrowing limit."""
    book = QuotaBook(
        [
            QueueSpec("a", {"cpu": 2000}, COHORT, {"cpu": 1000}),
            QueueSpec("b", {"cpu": 4000}, COHORT),
        ]
    )
    check = book.check("a", Resources(cpu=3000))
    assert check.fits and check.borrows
    over = book.check("a", Resources(cpu=3500))
    assert not over.fits and "borrow at most cpu 1" in over.reason
    book.use("b", Resources(cpu=3500))
    lent_out = book.check("a", Resources(cpu=3000))
    assert not lent_out.fits and "cohort 'team' has only cpu 2.5" in lent_out.reason


def test_lent_quota_is_not_promised_twice() -> None:
    """What a queue lent is not free for it until reclaimed: the cohort stays in its sum."""
    book = QuotaBook([QueueSpec("a", {"cpu": 2000}, COHORT), QueueSpec("b", {"cpu": 2000}, COHORT)])
    book.use("b", Resources(cpu=3000))
    assert book.borrowing("b")
    check = book.check("a", Resources(cpu=2000))
    assert not check.fits and not check.borrows
    assert "cohort 'team' has only cpu 1" in check.reason
    assert book.check("a", Resources(cpu=1000)).fits
