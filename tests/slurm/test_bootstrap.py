"""The bootstrap's word on Slurm's own SIGTERMs (pure: no cluster needed): why, from
``scontrol``'s line, and the stop file written beside trainfleet's, never over it nor
through a link."""

from __future__ import annotations

import doctest
import os
import stat
from pathlib import Path

import pytest

from trainfleet.backends.slurm import bootstrap
from trainfleet.backends.slurm.bootstrap import slurm_reason, write_stop_file

SHOWN = "JobId=7 JobName=trainfleet-x RunTime={ran} TimeLimit={limit} PreemptTime={preempt}"


def test_docstrings() -> None:
    assert doctest.testmod(bootstrap).failed == 0


@pytest.mark.parametrize(
    ("ran", "limit", "preempt", "why"),
    [
        ("00:00:10", "UNLIMITED", "2026-01-01T00:00:00", "preempted"),
        ("00:59:50", "01:00:00", "2026-01-01T00:00:00", "preempted"),  # both: the first
        ("00:00:20", "00:01:00", "None", "time-limit"),  # up to a minute early
        ("01:00:00", "01:00:00", "None", "time-limit"),  # the limit itself
        ("00:00:20", "00:02:00", "None", "cancelled"),  # 100 s left, 20 s warning
        ("00:00:20", "UNLIMITED", "None", "cancelled"),
    ],
)
def test_why_slurm_sends_sigterm(ran: str, limit: str, preempt: str, why: str) -> None:
    shown = SHOWN.format(ran=ran, limit=limit, preempt=preempt) + " Command=/x TimeLimit=1"
    assert slurm_reason(shown, warning=20) == why


def test_the_stop_file_is_written_whole_once_and_never_through_a_link(tmp_path: Path) -> None:
    share = tmp_path / "tasks"
    share.mkdir(mode=0o750)
    path = share / "stop-worker-0-0"
    assert write_stop_file(str(path), "preempted")
    assert path.read_text() == "preempted\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_gid == share.stat().st_gid
    assert not write_stop_file(str(path), "cancelled"), "trainfleet's (or an earlier) stays"
    assert path.read_text() == "preempted\n"
    assert sorted(os.listdir(share)) == ["stop-worker-0-0"], "no temporary file left"

    target = tmp_path / "target"
    target.write_text("mine\n")
    planted = share / "stop-worker-1-0"
    planted.symlink_to(target)
    assert not write_stop_file(str(planted), "time-limit")
    assert target.read_text() == "mine\n"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").symlink_to(elsewhere)
    assert not write_stop_file(str(tmp_path / "linked" / "stop-worker-0-0"), "time-limit")
    assert list(elsewhere.iterdir()) == []
