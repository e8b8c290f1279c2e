"""Task logs under the data directory: safe paths, byte ranges and live tails."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainfleet.datadir.layout import DataDir
from trainfleet.datadir.logs import LogTail, read_range


def test_job_ids_that_look_like_paths_are_refused(tmp_path: Path) -> None:
    data = DataDir(tmp_path)
    for bad in ("../etc", "a/b", "", "UPPER"):
        with pytest.raises(ValueError, match="invalid job id"):
            data.job_dir(bad)


def test_log_tail_returns_whole_lines_and_holds_partial_ones(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    tail = LogTail(log)
    assert tail.read() == b""
    log.write_bytes(b"one\ntw")
    assert tail.read() == b"one\n"
    with log.open("ab") as f:
        f.write(b"o\nthree")
    assert tail.read() == b"two\n"
    assert tail.read(final=True) == b"three"
    assert tail.pending() == 0
    assert read_range(log, 4, 7) == b"two"


def test_log_tail_passes_on_a_line_longer_than_a_chunk(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * 10 + b"\n")
    tail = LogTail(log)
    assert tail.read(limit=4) == b"xxxx"
    assert tail.read(limit=4) == b"xxxx"
    assert tail.read(limit=4) == b"xx\n"


def test_log_tail_skips_ahead_to_a_line_start(tmp_path: Path) -> None:
    log = tmp_path / "burst.log"
    log.write_bytes(b"".join(b"line %03d\n" % n for n in range(100)))  # 9 bytes a line
    tail = LogTail(log)
    assert tail.read(limit=9) == b"line 000\n"
    assert tail.pending() == 99 * 9
    skipped = tail.skip(keep=20)
    assert tail.read() == b"line 098\nline 099\n"
    assert skipped == 97 * 9
    assert tail.skip(keep=20) == 0
