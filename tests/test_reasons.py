"""The reason codes: one vocabulary, each code found again in the reason it starts."""

from __future__ import annotations

import pytest

from trainfleet.domain.records import Reason


@pytest.mark.parametrize("code", list(Reason))
def test_every_code_is_read_back_from_its_reason(code: Reason) -> None:
    assert Reason.of(code.because("details")) is code


def test_no_code_starts_another() -> None:
    """Else ``Reason.of`` would read one as the other."""
    for code in Reason:
        assert not [other for other in Reason if other != code and other.startswith(code)]


def test_a_reason_without_a_code() -> None:
    assert Reason.of("worker/0 exited with code 3") is None
