"""The audit trail in the store: records added and found newest first, by filter and page;
never changed or deleted; a record the store cannot take is logged, not raised."""

from __future__ import annotations

import logging

import pytest

from trainfleet.domain.records import AuditRecord
from trainfleet.store.audit import MAX_TEXT, AuditTrail
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreUnavailable


def _entry(n: int, **fields: object) -> AuditRecord:
    values: dict[str, object] = {"time": 100.0 + n, "action": "job.submit", "user": "ana"}
    return AuditRecord.from_row({**values, **fields})


def test_records_come_back_newest_first_with_ids_in_order(store: Store) -> None:
    for n in range(3):
        assert store.audit.record(_entry(n, target=f"j{n}", team="vision", source="10.0.0.1"))
    found = store.audit.find()
    assert [r.target for r in found] == ["j2", "j1", "j0"]
    assert found[0].id > found[1].id > found[2].id > 0
    assert found[2] == AuditRecord(
        id=found[2].id,
        time=100.0,
        user="ana",
        action="job.submit",
        target="j0",
        team="vision",
        source="10.0.0.1",
    )


def test_filters_and_pages(store: Store) -> None:
    store.audit.record(_entry(0, user="ana", team="vision"))
    store.audit.record(_entry(1, user="bo", team="audio", action="job.stop"))
    store.audit.record(_entry(2, user="bo", action="team.member.set", team="vision"))
    store.audit.record(_entry(3, user="", action="auth.failed"))
    store.audit.record(_entry(4, user="ana", action="jobs.x_y"))

    def actions(**filters: object) -> list[str]:
        return [r.action for r in store.audit.find(**filters)]  # type: ignore[arg-type]

    assert actions(user="bo") == ["team.member.set", "job.stop"]
    assert actions(action="job") == ["job.stop", "job.submit"]  # not jobs.x_y
    assert actions(action="team.member") == ["team.member.set"]
    assert actions(action="job.stop") == ["job.stop"]
    assert actions(action="jobs.x%") == [] and actions(action="jobs.x_y") == ["jobs.x_y"]
    assert actions(since=102.0) == ["jobs.x_y", "auth.failed", "team.member.set"]
    assert actions(teams=["vision"]) == ["team.member.set", "job.submit"]
    assert actions(teams=[]) == []
    first = store.audit.find(limit=2)
    assert [r.action for r in first] == ["jobs.x_y", "auth.failed"]
    rest = store.audit.find(limit=10, before_id=first[-1].id)
    assert [r.action for r in rest] == ["team.member.set", "job.stop", "job.submit"]


def test_the_trail_has_no_way_to_change_or_delete_a_record() -> None:
    """Records are added and read; the only removal is by age (``--audit-retention``),
    never of a record chosen by what it says."""
    public = {name for name in dir(AuditTrail) if not name.startswith("_")}
    assert public == {"record", "record_many", "find", "prune"}


class _Down:
    """A connection whose every write fails, as one to a database that stays down."""

    def write(self, body: object) -> None:
        raise StoreUnavailable("the store db is unavailable: connection refused")


def test_a_record_the_store_cannot_take_is_logged_whole_and_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trail = AuditTrail(_Down())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="trainfleet.audit"):
        assert trail.record(_entry(0, target="lost-1")) is False
    assert "audit record not stored" in caplog.text and '"target": "lost-1"' in caplog.text


def test_any_text_is_stored_cut_short(store: Store) -> None:
    """NUL (which PostgreSQL's text refuses), a lone surrogate, a very long detail."""
    store.audit.record(_entry(0, target="a\0b", detail="x" * 10_000, source="\udcff"))
    (found,) = store.audit.find()
    assert found.target == "a\\0b" and found.source == "?"
    assert len(found.detail) == MAX_TEXT and found.detail.endswith("...")
