"""The condition codes: one vocabulary, each reason's words stored with its code."""

from __future__ import annotations

import pytest

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import Reason


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_is_stored_with_its_own_code(reason: Reason) -> None:
    condition = reason.condition("details")
    assert condition.message == f"{reason.value}: details"
    assert condition.code is reason.code and condition.code.name == reason.name


def test_no_two_codes_share_a_value() -> None:
    """Else one would be an alias of the other, and read back as it."""
    assert len(Code.__members__) == len(Code)


@pytest.mark.parametrize(
    ("sentence", "code"),
    [
        ("waiting for quota: queue 'a' has a nominal quota of cpu 2", Code.WAITING_FOR_QUOTA),
        ("waiting for resources: needs gpu 1; free now gpu 0", Code.WAITING_FOR_RESOURCES),
        ("waiting for resources held for head, which is ahead of it", Code.WAITING_FOR_RESOURCES),
        ("waiting for its turn: 2 job(s) ahead of it", Code.WAITING_FOR_TURN),
        ("waiting for b-1, c-2 to stop: preempted for it", Code.WAITING_FOR_PREEMPTION),
        ("preempted for a-1, which starts first", Code.WAITING_FOR_RESOURCES),
        ("waiting to be admitted", Code.WAITING_FOR_ADMISSION),
    ],
)
def test_the_schedulers_sentences_are_waiting_codes(sentence: str, code: Code) -> None:
    assert Condition.waiting(sentence) == Condition(code, sentence)
