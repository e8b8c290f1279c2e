"""Listing jobs: newest first, filters, and keyset pages that neither repeat nor skip a job."""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobPage, JobRecord, State
from trainfleet.store.database import SELECT_JOBS, Store
from trainfleet.store.paging import encode_cursor
from trainfleet.store.queries import job_filter

MakeJob = Callable[..., JobRecord]


def _fill(store: Store, make_job: MakeJob, count: int, start: float = 1000.0) -> list[str]:
    """``count`` jobs, three to a timestamp (ties on created_at); their ids newest first."""
    for n in range(count):
        store.add_job(make_job(f"job-{n:04d}", created_at=start + n // 3), [])
    return [
        job_id
        for _, job_id in sorted(
            ((start + n // 3, f"job-{n:04d}") for n in range(count)), reverse=True
        )
    ]


def _all_pages(
    store: Store, limit: int, cursor: str | None = None, **filters: object
) -> list[JobPage]:
    """Every page from ``cursor`` on, following ``next_cursor``."""
    pages = [store.find_jobs(limit=limit, cursor=cursor, **filters)]  # type: ignore[arg-type]
    while pages[-1].next_cursor is not None:
        cursor = pages[-1].next_cursor
        pages.append(store.find_jobs(limit=limit, cursor=cursor, **filters))  # type: ignore[arg-type]
    return pages


def test_pages_cover_every_job_once_newest_first(store: Store, make_job: MakeJob) -> None:
    expected = _fill(store, make_job, 100)
    pages = _all_pages(store, limit=7)
    assert len(pages) == 15 and [len(p.jobs) for p in pages][-1] == 100 - 14 * 7
    assert [job.id for page in pages for job in page.jobs] == expected
    assert store.find_jobs(limit=100).next_cursor is None
    assert store.find_jobs(limit=99).next_cursor is not None
    assert [job.id for job in store.list_jobs(limit=5)] == expected[:5]


def test_pages_hold_still_while_new_jobs_arrive(store: Store, make_job: MakeJob) -> None:
    expected = _fill(store, make_job, 30)
    first = store.find_jobs(limit=10)
    for n in range(5):  # newer jobs, and one with the very timestamp of the first page's end
        store.add_job(make_job(f"new-{n}", created_at=5000.0 + n), [])
    # Same time as the page's last job but a higher id: it sorts into the page already read.
    store.add_job(make_job("job-zzzz", created_at=first.jobs[-1].created_at), [])
    rest = _all_pages(store, limit=10, cursor=first.next_cursor)
    assert [job.id for job in first.jobs] + [job.id for page in rest for job in page.jobs] == (
        expected
    )


def test_an_empty_store_has_one_empty_page(store: Store) -> None:
    assert store.find_jobs() == JobPage(jobs=[], next_cursor=None)


def test_filters_by_state_name_and_user(store: Store, make_job: MakeJob) -> None:
    for n in range(12):
        store.add_job(
            make_job(
                f"j-{n}",
                created_at=float(n),
                name="train" if n % 2 else "training",
                user=("ada", "bob", "cy")[n % 3],
            ),
            [],
        )
        if n % 4 == 0:
            store.transition(f"j-{n}", State.RUNNING, Condition(Code.STARTED))

    def ids(**filters: object) -> list[str]:
        return [job.id for page in _all_pages(store, limit=2, **filters) for job in page.jobs]

    assert ids(state="running") == ["j-8", "j-4", "j-0"]
    assert ids(state=State.RUNNING) == ["j-8", "j-4", "j-0"]
    assert ids(name="train") == ["j-11", "j-9", "j-7", "j-5", "j-3", "j-1"]  # exact, no prefix
    assert ids(name="trai") == []
    assert ids(user="bob") == ["j-10", "j-7", "j-4", "j-1"]
    assert ids(user="bob", name="training", state="running") == ["j-4"]
    assert ids(user="user") == []


def test_every_label_given_must_match(store: Store, make_job: MakeJob) -> None:
    store.add_job(make_job("a", created_at=1.0, labels={"team": "nlp", "env": "prod"}), [])
    store.add_job(make_job("b", created_at=2.0, labels={"team": "nlp", "env": "dev"}), [])
    store.add_job(make_job("c", created_at=3.0, labels={"team": "vision"}), [])
    store.add_job(make_job("d", created_at=4.0), [])

    def ids(labels: dict[str, str], limit: int = 50) -> list[str]:
        return [job.id for page in _all_pages(store, limit, labels=labels) for job in page.jobs]

    assert ids({"team": "nlp"}) == ["b", "a"]
    assert ids({"team": "nlp"}, limit=1) == ["b", "a"]
    assert ids({"team": "nlp", "env": "prod"}) == ["a"]
    assert ids({"team": "nlp", "env": "staging"}) == []
    assert ids({"env": "nlp"}) == []  # a value under another key does not count
    assert ids({}) == ["d", "c", "b", "a"]
    labelled = store.find_jobs(labels={"env": "dev"}).jobs[0]
    assert labelled.labels == {"team": "nlp", "env": "dev"}
    assert store.get_job("d").labels == {}  # type: ignore[union-attr]


def test_labels_may_hold_any_text(store: Store, make_job: MakeJob) -> None:
    labels = {"a.b/c": "x y", "quote'\"": "%(x)s :y", "ünï": ""}
    store.add_job(make_job(labels=labels), [])
    assert store.find_jobs(labels=labels).jobs[0].labels == labels


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "garbage!",
        "bm90IGpzb24",
        encode_cursor(1.0, "x")[:-2],
        "WzEsMl0",
        "WyJ4IiwieCJd",
        base64.urlsafe_b64encode(b"[1" + b"0" * 400 + b', "x"]').decode(),  # overflows a float
    ],
)
def test_a_bad_cursor_is_refused(store: Store, cursor: str) -> None:
    with pytest.raises(ValueError, match="invalid cursor"):
        store.find_jobs(cursor=cursor)


def test_a_limit_below_one_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="limit"):
        store.find_jobs(limit=0)


@pytest.mark.parametrize(
    "filters",
    [{}, {"state": "running"}, {"name": "n"}, {"user": "u"}, {"labels": {"k": "v"}}],
)
def test_sqlite_reads_a_page_in_index_order(tmp_path: Path, filters: dict[str, object]) -> None:
    """Each listing walks an index in page order: no sort of the whole table, whatever its size."""
    path = tmp_path / "trainfleet.db"
    Store.open(path).close()
    where, params = job_filter(
        state=filters.get("state"),  # type: ignore[arg-type]
        name=filters.get("name"),  # type: ignore[arg-type]
        user=filters.get("user"),  # type: ignore[arg-type]
        labels=filters.get("labels", {}),  # type: ignore[arg-type]
        after=(1.0, "x"),
    )
    query = f"{SELECT_JOBS} {where} ORDER BY created_at DESC, id DESC LIMIT 51"
    plan = " | ".join(
        row[3] for row in sqlite3.connect(path).execute(f"EXPLAIN QUERY PLAN {query}", params)
    )
    assert "TEMP B-TREE" not in plan and "USING INDEX ix_jobs_" in plan, plan
