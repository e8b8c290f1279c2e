"""A follow of a finished log returns exactly its bytes from where it starts, to its end.

Through the server's real follow code (``Client.follow_log`` over the SSE stream of a live
server) with small shared windows and read sizes, so that lines longer than both, logs far
longer than the window, followers behind it, chunk boundaries inside lines and inside
UTF-8 characters all happen in logs of a few KiB. Each log is a real task's output.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainfleet.client import Client

from .harness import LiveServer

SIZES = [(1, 5), (16, 3), (64, 64), (256, 7), (4096, 100)]
"""(shared window, read size per poll) of the servers the property runs against."""

TEXT = st.text(st.sampled_from("ab \tZ\ré✓"), max_size=300)
"""A line's text: short and long, with characters of 1 to 3 bytes in UTF-8."""

LOGS = st.builds(
    lambda lines, newline: "\n".join(lines).encode() + (b"\n" if newline and lines else b""),
    st.lists(TEXT, max_size=25),
    st.booleans(),
)

Servers = Callable[[tuple[int, int]], tuple[LiveServer, Client]]
names = itertools.count()


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    """A live server (and a client of it) per (window, read size), started when first asked."""
    started: dict[tuple[int, int], tuple[LiveServer, Client]] = {}
    folder = Path(tempfile.mkdtemp(prefix="follow-bytes-"))

    def server(sizes: tuple[int, int]) -> tuple[LiveServer, Client]:
        if sizes not in started:
            window, read = sizes
            data = folder / f"data-{window}-{read}"
            live = LiveServer(data, log_window=window, log_read=read).start()
            started[sizes] = live, Client(live.url, live.token, timeout=30)
        return started[sizes]

    yield server
    for live, client in started.values():
        client.close()
        live.stop()


def finished_job(client: Client, content: bytes) -> str:
    """A job whose task wrote ``content`` and ended."""
    folder = Path(tempfile.mkdtemp(prefix="follow-bytes-job-"))
    (folder / "content").write_bytes(content)
    spec = f"name: cat-{next(names)}\nroles:\n  worker: {{command: 'cat content'}}\n"
    job = client.submit(spec, server_workdir=folder)
    assert client.wait(job.id).state == "succeeded"
    assert client.read_log(job.id, "worker", 0) == content
    return job.id


def followed(client: Client, job_id: str, start: int) -> str:
    return "".join(client.follow_log(job_id, "worker", 0, start=start))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.sampled_from(SIZES), content=LOGS, data=st.data())
def test_every_follow_returns_the_log_from_its_offset_to_its_end(
    servers: Servers, sizes: tuple[int, int], content: bytes, data: st.DataObject
) -> None:
    _, client = servers(sizes)
    job_id = finished_job(client, content)
    starts = data.draw(st.lists(st.integers(0, len(content) + 3), min_size=1, max_size=4))
    for start in [0, *starts]:
        expected = client.read_log(job_id, "worker", 0, start=start)
        assert followed(client, job_id, start) == expected.decode("utf-8", "replace"), start


def test_a_10_mb_log_is_followed_to_its_end(client: Client) -> None:
    """The soak's case, on a server of default settings: a 10,485,800-byte log of 100-byte
    lines followed from byte 0 ended after 6,291,400 bytes."""
    content = (b"x" * 99 + b"\n") * 104_858
    job_id = finished_job(client, content)
    assert followed(client, job_id, 0).encode() == content
