"""The throttle of failed authentications: a few a minute per source and overall, the rest
counted into the next one recorded, and a bounded memory of sources."""

from __future__ import annotations

from trainfleet.server.throttle import Skipped, Throttle


def test_a_source_gets_a_few_a_minute_and_the_next_says_how_many_were_left_out() -> None:
    throttle = Throttle(per_source=2, overall=100, seconds=60)
    assert throttle.admit("a", 0) == Skipped(0, 0)
    assert throttle.admit("a", 1) == Skipped(0, 0)
    assert [throttle.admit("a", t) for t in (2, 3, 4)] == [None, None, None]
    assert throttle.admit("b", 5) == Skipped(0, 0)  # another source has its own
    assert throttle.admit("a", 60) == Skipped(3, 0)  # a new minute
    assert throttle.admit("a", 61) == Skipped(0, 0)


def test_all_sources_together_are_bounded_too() -> None:
    throttle = Throttle(per_source=5, overall=3, seconds=60)
    assert [throttle.admit(f"s{n}", n) is not None for n in range(5)] == [True] * 3 + [False] * 2
    assert throttle.admit("s3", 61) == Skipped(1, 0)


def test_memory_is_bounded_and_forgotten_counts_are_told_anyway() -> None:
    throttle = Throttle(per_source=1, overall=10_000, seconds=60, sources=2)
    throttle.admit("old", 0)
    assert throttle.admit("old", 1) is None  # counted: 1 left out of "old"
    assert throttle.admit("a", 2) == Skipped(0, 0)
    assert throttle.admit("b", 3) == Skipped(0, 1)  # "old" is forgotten, its count told
    for n in range(1000):
        throttle.admit(f"s{n}", 4)
    assert len(throttle._windows) == 2
