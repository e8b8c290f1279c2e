"""Store locations, the PostgreSQL parameter style and page cursors: pure functions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfleet.store.dialects import PostgreSQL, SQLite
from trainfleet.store.errors import StoreError
from trainfleet.store.migrate import sqlalchemy_url
from trainfleet.store.paging import decode_cursor, encode_cursor
from trainfleet.store.targets import Target, parse_target


@pytest.mark.parametrize(
    ("given_target", "path"),
    [
        ("/var/lib/tf/trainfleet.db", "/var/lib/tf/trainfleet.db"),
        ("relative/trainfleet.db", "relative/trainfleet.db"),
        (Path("/x/y.db"), "/x/y.db"),
        ("sqlite:///relative.db", "relative.db"),
        ("sqlite:////abs/olute.db", "/abs/olute.db"),
        ("SQLite:////a b/c#d.db", "/a b/c#d.db"),
    ],
)
def test_paths_and_sqlite_urls_name_sqlite_files(given_target: str | Path, path: str) -> None:
    assert parse_target(given_target) == Target("sqlite", path=Path(path))


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_postgres_urls_become_libpq_urls(scheme: str) -> None:
    target = parse_target(f"{scheme}://ada:pw@db.example:5433/fleet?sslmode=require")
    assert target == Target(
        "postgresql", url="postgresql://ada:pw@db.example:5433/fleet?sslmode=require"
    )
    url = sqlalchemy_url(target)
    assert url.drivername == "postgresql+psycopg" and url.password == "pw"
    assert url.database == "fleet" and url.query == {"sslmode": "require"}


def test_sqlalchemy_names_the_same_sqlite_file_even_with_odd_characters() -> None:
    url = sqlalchemy_url(parse_target("/tmp/a?b#c%d.db"))
    assert url.get_backend_name() == "sqlite" and url.database == "/tmp/a?b#c%d.db"


def test_messages_never_show_the_password() -> None:
    target = parse_target("postgresql://ada:s3cret@host/db")
    assert str(target) == "postgresql://ada:***@host/db"
    assert "s3cret" not in repr(target)
    assert str(parse_target("postgresql://host/db")) == "postgresql://host/db"


@pytest.mark.parametrize(
    "bad", ["mysql://u:p@h/db", "sqlite:///:memory:", "sqlite:///", "sqlite:///x.db?mode=ro"]
)
def test_unusable_targets_are_refused(bad: str) -> None:
    with pytest.raises(StoreError):
        parse_target(bad)


def test_postgres_parameters_are_pyformat_and_percent_signs_are_kept() -> None:
    query = "SELECT :a, x::text, '100%' FROM t WHERE b = :b_2 AND c = :a"
    assert PostgreSQL().sql(query) == (
        "SELECT %(a)s, x::text, '100%%' FROM t WHERE b = %(b_2)s AND c = %(a)s"
    )
    assert SQLite().sql(query) == query


@given(st.floats(allow_nan=False, allow_infinity=False), st.text())
def test_cursors_round_trip_exactly(created_at: float, job_id: str) -> None:
    assert decode_cursor(encode_cursor(created_at, job_id)) == (created_at, job_id)


@given(st.text())
def test_any_other_text_is_an_invalid_cursor_or_a_valid_position(text: str) -> None:
    try:
        created_at, job_id = decode_cursor(text)
    except ValueError as error:
        assert str(error) == "invalid cursor"
    else:
        assert isinstance(created_at, float) and isinstance(job_id, str)
