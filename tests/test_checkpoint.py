"""``trainfleet.checkpoint``: only committed steps are offered, whatever dies when; older
steps are pruned to ``keep``; several writers commit once; bad arguments are named."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fill_disk, tmpfs, wait_for

from trainfleet import checkpoint


def _save(root: Path, step: int, text: str = "w", **options: object) -> None:
    with checkpoint.save(step, root, **options) as folder:  # type: ignore[arg-type]
        (folder / "weights").write_text(text)


def test_only_committed_steps_are_offered_newest_first(tmp_path: Path) -> None:
    assert checkpoint.latest(tmp_path / "none") is None
    _save(tmp_path, 10)
    with pytest.raises(RuntimeError), checkpoint.save(20, tmp_path) as folder:
        (folder / "weights").write_text("half")
        raise RuntimeError("died while writing")
    (tmp_path / "step-30").mkdir()  # a folder no save committed
    (tmp_path / "notes").mkdir()
    found = checkpoint.latest(tmp_path)
    assert found == checkpoint.Checkpoint(10, tmp_path / "step-10")
    _save(tmp_path, 20, "whole")  # the half-written step is cleared, then committed
    assert checkpoint.latest(tmp_path) == checkpoint.Checkpoint(20, tmp_path / "step-20")
    assert (tmp_path / "step-20" / "weights").read_text() == "whole"


def test_a_step_saved_again_is_not_offered_until_whole(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2, "first")
    with pytest.raises(RuntimeError), checkpoint.save(2, tmp_path) as folder:
        (folder / "weights").write_text("sec")
        raise RuntimeError("died while writing it again")
    assert checkpoint.latest(tmp_path) == checkpoint.Checkpoint(1, tmp_path / "step-1")


def test_a_writer_killed_mid_save_leaves_nothing_offered(tmp_path: Path) -> None:
    _save(tmp_path, 5)
    program = (
        "import sys, time; from trainfleet import checkpoint\n"
        "with checkpoint.save(6, sys.argv[1]) as folder:\n"
        "    (folder / 'weights').write_text('part'); print('writing', flush=True)\n"
        "    time.sleep(60)\n"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", program, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    assert (tmp_path / "step-6" / "weights").exists()
    assert checkpoint.latest(tmp_path) == checkpoint.Checkpoint(5, tmp_path / "step-5")


def test_older_steps_are_pruned_to_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for step in range(5):
        _save(tmp_path, step)
    assert [c.step for c in checkpoint.committed(tmp_path)] == [2, 3, 4]  # keep 3
    monkeypatch.setenv(checkpoint.KEEP_VARIABLE, "1")
    _save(tmp_path, 5)
    assert [c.step for c in checkpoint.committed(tmp_path)] == [5]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-5"]
    _save(tmp_path, 6, keep=2)
    assert [c.step for c in checkpoint.committed(tmp_path)] == [5, 6]


def test_several_writers_commit_once(tmp_path: Path) -> None:
    for rank in range(3):  # each rank writes its shard; none commits
        with checkpoint.save(8, tmp_path, commit=False) as folder:
            (folder / f"shard-{rank}").write_text(str(rank))
    assert checkpoint.latest(tmp_path) is None
    done = checkpoint.commit(8, tmp_path)
    assert checkpoint.latest(tmp_path) == done
    assert sorted(p.name for p in done.path.iterdir()) == [
        "COMMITTED",
        *(f"shard-{r}" for r in range(3)),
    ]


def test_the_task_environment_names_the_folder_and_the_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(checkpoint.PATH_VARIABLE, raising=False)
    with pytest.raises(ValueError, match="TRAINFLEET_CHECKPOINT_PATH"):
        checkpoint.latest()
    monkeypatch.setenv(checkpoint.PATH_VARIABLE, str(tmp_path / "ck"))
    heartbeat = tmp_path / "heartbeat"
    monkeypatch.setenv(checkpoint.HEARTBEAT_VARIABLE, str(heartbeat))
    with checkpoint.save(3) as folder:
        (folder / "x").write_text("x")
    assert checkpoint.latest() == checkpoint.Checkpoint(3, tmp_path / "ck" / "step-3")
    wait_for(heartbeat.exists, 5, "the heartbeat")


@pytest.mark.parametrize("step", [-1, 1.5, "3", True])
def test_a_bad_step_is_named(tmp_path: Path, step: object) -> None:
    with pytest.raises(ValueError, match="step must be a whole number"):
        _save(tmp_path, step)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keep must be at least 1"):
        checkpoint.prune(tmp_path, keep=0)
    with pytest.raises(FileNotFoundError, match="no step 9 to commit"):
        checkpoint.commit(9, tmp_path)


def test_a_full_disk_mid_save_or_at_its_commit_leaves_the_last_step_offered(
    tmp_path: Path,
) -> None:
    """On a real 1 MB tmpfs: a step whose data does not fit, and one whose data fit but
    whose commit marker did not, are never offered and give their room back at once; the
    step before stays the newest, and once space is freed the same steps save and commit."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        with checkpoint.save(1, disk) as folder:
            (folder / "model").write_bytes(b"1" * 1000)
        with pytest.raises(OSError) as full, checkpoint.save(2, disk) as folder:
            (folder / "model").write_bytes(b"2" * (2 << 20))  # larger than the disk
        assert full.value.errno == errno.ENOSPC
        assert checkpoint.latest(disk) == checkpoint.Checkpoint(1, disk / "step-1")

        filler = disk / "filler"
        with pytest.raises(OSError) as full, checkpoint.save(3, disk) as folder:
            (folder / "model").write_bytes(b"3" * 1000)
            fill_disk(filler)  # the data is written; the marker finds no room
        assert full.value.errno == errno.ENOSPC
        assert not (disk / "step-2").exists() and not (disk / "step-3").exists()
        assert checkpoint.latest(disk) == checkpoint.Checkpoint(1, disk / "step-1")

        filler.unlink()
        for step in (2, 3):
            with checkpoint.save(step, disk) as folder:
                (folder / "model").write_bytes(b"s" * 1000)
        assert checkpoint.latest(disk) == checkpoint.Checkpoint(3, disk / "step-3")
