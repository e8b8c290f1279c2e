"""A task's log under its cap (``shim.Capture``), with real tasks under the real shim.

An output within the cap is the log, byte for byte, written once; one past the cap keeps
its head and its tail with a line saying how much was dropped between; a reader that
followed the log past its head goes on from where the log was cut back, and ends with the
same bytes as the file. The same through a server's followers: the SSE stream (one shared
reader) and the CLI's remote view (byte ranges).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import fill_disk, tmpfs, wait_for

from trainfleet.backends.local import LocalBackend
from trainfleet.backends.supervision import SHIM
from trainfleet.cli.remote import RemoteService, RemoteTail
from trainfleet.client import Client
from trainfleet.control.assembly import engine_at
from trainfleet.control.settings import Target
from trainfleet.datadir.logs import LogTail

CAP = 64 << 10
# Prints numbered lines in three phases: PHASE1 bytes (within the cap), then, once the file
# "go1" exists, PHASE2 bytes more (past the cap), then, once "go2" exists, the last line.
# Each phase ends where its size does, within a line.
TASK = """\
import os, sys, time
def wait(name):
    while not os.path.exists(name):
        time.sleep(0.01)
def lines(first, size):
    out, n = b"", first
    while len(out) < size:
        out += b"line %07d\\n" % n
        n += 1
    view = memoryview(out)[:size]
    while view:
        view = view[os.write(1, view):]
    return n
n = lines(0, int(sys.argv[1]))
wait("go1")
n = lines(n, int(sys.argv[2]))
wait("go2")
os.write(1, b"the end\\n")
"""


def _output(phase1: int, phase2: int) -> bytes:
    """What TASK prints with these phase sizes."""
    out, n = b"", 0
    for size in (phase1, phase2):
        chunk = b""
        while len(chunk) < size:
            chunk += b"line %07d\n" % n
            n += 1
        out += chunk[:size]
    return out + b"the end\n"


def _shim(folder: Path, phase1: int, phase2: int, cap: int = CAP) -> subprocess.Popen[bytes]:
    (folder / "task.py").write_text(TASK)
    argv = [sys.executable, "-I", "-S", str(SHIM), str(folder / "rec")]
    argv += ["--log", str(folder / "task.log"), "--log-cap", str(cap), "--"]
    argv += [sys.executable, "-S", "task.py", str(phase1), str(phase2)]
    return subprocess.Popen(argv, cwd=folder)


def _finish(folder: Path, shim: subprocess.Popen[bytes]) -> bytes:
    for name in ("go1", "go2"):
        (folder / name).touch()
    assert shim.wait(timeout=60) == 0
    assert not list(folder.glob("task.log.tail.*"))  # the ring is gone
    return (folder / "task.log").read_bytes()


@pytest.mark.parametrize("size", [CAP - 100, CAP - 8])  # with "the end\n": the cap exactly
def test_an_output_within_the_cap_is_the_log(tmp_path: Path, size: int) -> None:
    log = _finish(tmp_path, _shim(tmp_path, size, 0))
    assert log == _output(size, 0)
    assert len(log) <= CAP


def test_an_output_past_the_cap_keeps_its_head_and_its_tail(tmp_path: Path) -> None:
    output = _output(40 << 10, 1 << 20)
    log = _finish(tmp_path, _shim(tmp_path, 40 << 10, 1 << 20))
    head, rest = log[: CAP // 2], log[CAP // 2 :]
    assert head == output[: CAP // 2]
    note, marker, tail = rest.removeprefix(b"\n").split(b"\n", 2)  # the note on its own line
    assert note == (
        b"[trainfleet: this log keeps its first 32768 bytes and the last 16384-32768 bytes "
        b"of the output; they follow when the task ends]"
    )
    found = re.fullmatch(rb"\[trainfleet: (\d+) bytes dropped here\]", marker)
    assert found, marker
    dropped = int(found[1])
    assert output.endswith(tail) and CAP // 4 <= len(tail) <= CAP // 2
    assert tail.startswith(b"line ")  # the tail starts at a line
    assert CAP // 2 + dropped + len(tail) == len(output)
    assert len(log) < CAP + 200


def test_a_disk_full_at_the_cut_back_starts_the_ring_empty(tmp_path: Path) -> None:
    """On a real small tmpfs with room for the output up to the cap and a little more, but
    not for the copy of the log's last quarter into the ring: the log is still cut back to
    its head, the ring starts empty, no output after the cut is lost, the tail starts at a
    line, and the task's exit is recorded."""
    with tmpfs(tmp_path / "disk", "2m") as disk:
        shim = _shim(disk, 40 << 10, 28 << 10)  # 4 KiB past the cap, and "the end"
        log = disk / "task.log"
        wait_for(lambda: log.exists() and log.stat().st_size >= 40 << 10, 30, "phase 1")
        filler = disk / "filler"
        fill_disk(filler)
        # Room for the log's last 24 KiB, 4 KiB into the ring and 12 KiB of the 16 KiB copy.
        os.truncate(filler, filler.stat().st_size - (40 << 10))
        (disk / "go1").touch()
        wait_for(lambda: log.stat().st_size < 40 << 10, 30, "the log to be cut back")
        filler.unlink()
        written = _finish(disk, shim)
        assert (disk / "rec.exit").read_text().strip() == "0"
    output = _output(40 << 10, 28 << 10)
    assert written[: CAP // 2] == output[: CAP // 2]
    note, marker, tail = written[CAP // 2 :].removeprefix(b"\n").split(b"\n", 2)
    assert note.startswith(b"[trainfleet: this log keeps its first 32768 bytes")
    found = re.fullmatch(rb"\[trainfleet: (\d+) bytes dropped here\]", marker)
    assert found, marker
    assert tail.startswith(b"line ") and output.endswith(tail)
    assert len(tail) < 4 << 10 + 100  # the newer segment alone: the copy found no room
    assert CAP // 2 + int(found[1]) + len(tail) == len(output)


def test_a_killed_attempts_ring_is_dropped_by_the_next(tmp_path: Path) -> None:
    """kill -9 of a shim whose output passed the cap leaves its ring files (the tail it
    would have added at the end); the next attempt's shim on the same log deletes them and
    says in the log that the rest of the last attempt's output is lost."""
    log = tmp_path / "task.log"
    first = _shim(tmp_path, 40 << 10, 100 << 10)
    wait_for(lambda: log.exists() and log.stat().st_size >= 40 << 10, 30, "phase 1")
    (tmp_path / "go1").touch()
    ring = [tmp_path / "task.log.tail.0", tmp_path / "task.log.tail.1"]
    wait_for(lambda: all(path.exists() for path in ring), 30, "the ring")
    first.kill()
    first.wait()
    (tmp_path / "go2").touch()  # its task ends on the broken pipe
    cut_back = log.read_bytes()
    for name in ("go1", "go2"):
        (tmp_path / name).unlink()
    written = _finish(tmp_path, _shim(tmp_path, 1000, 0))  # no ring files left
    assert written.startswith(cut_back)
    assert written[len(cut_back) :] == (
        b"[trainfleet: the rest of the last attempt's output is lost: its supervisor was killed]\n"
        + _output(1000, 0)
    )


def _follow(read: Callable[[], bytes], until: Callable[[], bool]) -> bytes:
    got = b""
    while not until():
        got += read()
        time.sleep(0.01)
    return got + read()


def test_a_follower_goes_on_from_where_the_log_was_cut_back(tmp_path: Path) -> None:
    """The follower reads 40 KiB live, then the output passes the cap and the log is cut
    back to its head: the follower goes on from there, and once the task has ended it has
    read the cut-back note, the dropped-bytes line and the tail, as the file has them."""
    path = tmp_path / "task.log"
    shim = _shim(tmp_path, 40 << 10, 200 << 10)
    tail = LogTail(path)
    seen = _follow(tail.read, lambda: path.exists() and path.stat().st_size >= 40 << 10)
    phase1 = _output(40 << 10, 0)[: 40 << 10]
    assert phase1.startswith(seen) and len(seen) > (40 << 10) - 13  # its complete lines
    (tmp_path / "go1").touch()
    wait_for(lambda: path.stat().st_size < 40 << 10, 30, "the log to be cut back")
    seen += tail.read()
    reset_at = tail.offset
    assert CAP // 2 <= reset_at < 40 << 10  # it went on from the log's new end
    log = _finish(tmp_path, shim)
    seen += tail.read(final=True)
    assert seen.startswith(phase1[: CAP // 2]) and seen.endswith(log[reset_at:])
    assert b"bytes dropped here]\n" in log[reset_at:] and seen.endswith(b"the end\n")


def test_followers_of_a_server_go_on_after_the_cut(tmp_path: Path) -> None:
    """Through a server: the SSE stream (the shared reader) and the CLI's remote view
    (byte ranges) both end with what the log holds past its head."""
    from server.harness import LiveServer

    backend = LocalBackend(supervised=True, log_cap=CAP)
    engine = engine_at(tmp_path / "data", backend=backend, supervised=True, vault=True)
    server = LiveServer(tmp_path / "data", engine=engine).start()
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "task.py").write_text(TASK)
    try:
        with Client(server.url, server.token) as client:
            job = client.submit(
                "name: cut\nroles:\n  worker: {command: python -S task.py 40960 204800}\n",
                server_workdir=folder,
            )
            log = engine.log_path(job.id, "worker", 0)
            wait_for(lambda: log.exists() and log.stat().st_size >= 40 << 10, 60, "phase 1")
            stream = client.follow_log(job.id, "worker", 0)
            streamed = next(stream)
            service = RemoteService(Target(server.url, server.token))
            remote = RemoteTail(service, job.id, "worker", 0)
            viewed = _follow(remote.read, lambda: remote.offset >= 40 << 10)
            (folder / "go1").touch()
            wait_for(lambda: log.stat().st_size < 40 << 10, 30, "the log to be cut back")
            time.sleep(0.3)  # a few polls of the stream's shared reader
            viewed += remote.read()
            assert remote.offset < 40 << 10
            (folder / "go2").touch()
            assert client.wait(job.id).state == "succeeded"
            streamed += "".join(stream)
            viewed += remote.read(final=True)
            # Past the cut-back note (which a follower may have found in place or not yet):
            # the line saying what was dropped, then the tail.
            kept = log.read_bytes().split(b"they follow when the task ends]\n", 1)[1].decode()
            assert kept.startswith("[trainfleet: ") and kept.endswith("the end\n")
            for seen in (streamed, viewed.decode()):
                assert seen.startswith("line 0000000\n") and seen.endswith(kept)
    finally:
        server.stop()
