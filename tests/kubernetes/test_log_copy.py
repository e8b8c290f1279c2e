"""A Kubernetes log copy's own bookkeeping, without a cluster: the time of the last line
written, kept in place, read back by the next copy; and when a log counts as chatty."""

from __future__ import annotations

import os
from pathlib import Path

from trainfleet.backends.kubernetes.logs import CHATTY_LINES, LogCopy, _chatty


def _lines(*seconds: int) -> list[bytes]:
    return [b"2026-11-28T18:00:%02d.5Z line-%d" % (second, second) for second in seconds]


def test_the_last_line_is_kept_in_place_and_the_next_copy_goes_on_after_it(
    tmp_path: Path,
) -> None:
    log, record = tmp_path / "task.log", tmp_path / "task.record"
    first = LogCopy("pod", log, (), record, lambda: False)
    with log.open("ab", buffering=0) as out:
        first.write(_lines(1, 2), out)
        stamp_file = tmp_path / "task.record.logged"
        inode = stamp_file.stat().st_ino
        first.write(_lines(2, 3), out)  # line 2 again, as a stream read again brings it
    first.close()
    assert stamp_file.stat().st_ino == inode, "written over, not replaced"
    assert stamp_file.read_text() == "2026-11-28T18:00:03.500000000Z\n"
    again = LogCopy("pod", log, (), record, lambda: False)
    with log.open("ab", buffering=0) as out:
        again.write(_lines(3, 4), out)
    again.close()
    assert log.read_text() == "line-1\nline-2\nline-3\nline-4\n"


def test_a_stamp_longer_than_the_new_one_is_cut_to_it(tmp_path: Path) -> None:
    """A stamp file an earlier version left (no newline, or longer) reads, and is written
    over whole."""
    record = tmp_path / "task.record"
    (tmp_path / "task.record.logged").write_text("2026-11-28T18:00:01.5Z" + " " * 40)
    copy = LogCopy("pod", tmp_path / "task.log", (), record, lambda: False)
    with (tmp_path / "task.log").open("ab", buffering=0) as out:
        copy.write(_lines(1, 2), out)
    copy.close()
    assert (tmp_path / "task.log").read_text() == "line-2\n"
    assert (tmp_path / "task.record.logged").read_text() == "2026-11-28T18:00:02.500000000Z\n"


def test_a_link_or_a_pipe_in_the_stamp_s_place_is_neither_followed_nor_waited_on(
    tmp_path: Path,
) -> None:
    """The stamp file sits beside the task's records: whatever stands in its place, no
    file elsewhere is read or written through it, nothing blocks, and the log is copied."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("2026-11-28T18:00:09.0Z\n")
    for name, make in (
        ("link", lambda path: path.symlink_to(elsewhere)),
        ("pipe", lambda path: os.mkfifo(path)),
    ):
        record = tmp_path / f"{name}.record"
        make(tmp_path / f"{name}.record.logged")
        copy = LogCopy("pod", tmp_path / f"{name}.log", (), record, lambda: False)
        assert copy.last is None, "the link's target, read as the last line"
        with (tmp_path / f"{name}.log").open("ab", buffering=0) as out:
            copy.write(_lines(1, 2), out)
        copy.close()
        assert (tmp_path / f"{name}.log").read_text() == "line-1\nline-2\n"
    assert elsewhere.read_text() == "2026-11-28T18:00:09.0Z\n"


def test_a_log_is_chatty_past_its_lines_a_second() -> None:
    assert not _chatty(CHATTY_LINES, 1.0)
    assert _chatty(CHATTY_LINES // 10 + 1, 0.1)
    assert not _chatty(5 * CHATTY_LINES, 5.0)
    assert _chatty(5 * CHATTY_LINES + 1, 5.0)
