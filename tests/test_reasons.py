"""The condition codes: one vocabulary, each reason's words stored with its code."""

from __future__ import annotations

import pytest

from trainfleet.domain.conditions import Code
from trainfleet.domain.records import Reason


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_is_stored_with_its_own_code(reason: Reason) -> None:
    condition = reason.condition("details")
    assert condition.message == f"{reason.value}: details"
    assert condition.code is reason.code and condition.code.name == reason.name


def test_no_two_codes_share_a_value() -> None:
    """Else one would be an alias of the other, and read back as it."""
    assert len(Code.__members__) == len(Code)
