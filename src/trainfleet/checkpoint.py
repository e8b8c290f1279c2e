"""Checkpoints a restarted task can trust: ``step-<N>`` folders, each committed by a
``COMMITTED`` marker written last and atomically, so that a half-written one is never
offered. Standard library only: a task's Python needs nothing but this file.

In a task, the folder is ``$TRAINFLEET_CHECKPOINT_PATH``, and ``latest()`` is what
``$TRAINFLEET_RESUME_FROM`` names when the task starts::

    from trainfleet import checkpoint

    found = checkpoint.latest()
    start = found.step + 1 if found else 0
    for step in range(start, steps):
        train_one_step()
        if step % 50 == 0:
            with checkpoint.save(step) as folder:   # commits on a clean exit
                torch.save(model.state_dict(), folder / "model.pt")

Whatever writes the files (``torch.save``, ``torch.distributed.checkpoint``,
``tf.train.Checkpoint``) works as it is. Where several processes write one step's files,
each calls ``save(step, commit=False)`` and one of them ``commit(step)`` once all have
written (after a barrier). Committed steps beyond the newest ``keep`` are removed.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> with save(7, root) as folder:
...     _ = (folder / "weights").write_text("w")
>>> latest(root).step, latest(root).path.name
(7, 'step-7')
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PATH_VARIABLE = "TRAINFLEET_CHECKPOINT_PATH"
KEEP_VARIABLE = "TRAINFLEET_CHECKPOINT_KEEP"
HEARTBEAT_VARIABLE = "TRAINFLEET_HEARTBEAT"
MARKER = "COMMITTED"
DEFAULT_KEEP = 3
_STEP = re.compile(r"^step-(\d{1,18})$")


@dataclass(frozen=True)
class Checkpoint:
    """One committed step: its number and its folder."""

    step: int
    path: Path


def folder_of(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$TRAINFLEET_CHECKPOINT_PATH``; ValueError where neither is set."""
    chosen = path if path is not None else os.environ.get(PATH_VARIABLE)
    if not chosen:
        raise ValueError(f"no checkpoint folder: pass one, or run as a task (${PATH_VARIABLE})")
    return Path(chosen)


def committed(path: str | os.PathLike[str] | None = None) -> list[Checkpoint]:
    """Every committed step in the folder, oldest first (none where it does not exist)."""
    root = folder_of(path)
    found = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    for entry in entries:
        match = _STEP.match(entry.name)
        if match and entry.is_dir(follow_symlinks=False) and _is_committed(Path(entry.path)):
            found.append(Checkpoint(int(match.group(1)), Path(entry.path)))
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def latest(path: str | os.PathLike[str] | None = None) -> Checkpoint | None:
    """The newest committed step; None before the first."""
    steps = committed(path)
    return steps[-1] if steps else None


@contextmanager
def save(
    step: int,
    path: str | os.PathLike[str] | None = None,
    *,
    commit: bool = True,
    keep: int | None = None,
) -> Iterator[Path]:
    """The folder to write step ``step`` into; committed when the block ends without an
    error (``commit``), then older steps beyond ``keep`` removed. An error (a full disk
    among them) removes what the block wrote; a kill leaves it uncommitted: never offered,
    cleared by the next save of that step. A step saved again is uncommitted while it is
    written."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a whole number from 0, not {step!r}")
    folder = folder_of(path) / f"step-{step}"
    if _is_committed(folder):  # written again: not offered until it is whole again
        (folder / MARKER).unlink(missing_ok=True)
        _sync_dir(folder)
    elif commit and folder.is_dir():
        shutil.rmtree(folder)  # a half-written attempt of its only writer
    folder.mkdir(parents=True, exist_ok=True)
    try:
        yield folder
        if commit:
            _commit(folder, keep)
    except BaseException:
        if commit:  # its only writer: its room is given back at once
            shutil.rmtree(folder, ignore_errors=True)
        raise


def commit(
    step: int, path: str | os.PathLike[str] | None = None, *, keep: int | None = None
) -> Checkpoint:
    """Commit step ``step``, written by ``save(step, commit=False)`` (by one process, once
    every writer is done), then remove older steps beyond ``keep``."""
    folder = folder_of(path) / f"step-{step}"
    if not folder.is_dir():
        raise FileNotFoundError(f"no step {step} to commit in {folder.parent}")
    _commit(folder, keep)
    return Checkpoint(step, folder)


def _commit(folder: Path, keep: int | None) -> None:
    _sync_tree(folder)
    temporary = folder / f".{MARKER}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w") as marker:
            marker.write(f"{time.time():.3f}\n")
            marker.flush()
            os.fsync(marker.fileno())
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, folder / MARKER)  # the step exists from here, whole
    _sync_dir(folder)
    _sync_dir(folder.parent)
    prune(folder.parent, keep)
    beat()


def prune(path: str | os.PathLike[str] | None = None, keep: int | None = None) -> None:
    """Remove committed steps older than the newest ``keep`` (default
    ``$TRAINFLEET_CHECKPOINT_KEEP``, else 3)."""
    wanted = keep if keep is not None else int(os.environ.get(KEEP_VARIABLE, DEFAULT_KEEP))
    if wanted < 1:
        raise ValueError(f"keep must be at least 1, not {wanted}")
    steps = committed(path)
    for old in steps[: max(0, len(steps) - wanted)]:
        (old.path / MARKER).unlink()  # uncommitted first: never offered half-removed
        shutil.rmtree(old.path, ignore_errors=True)


def beat() -> None:
    """Tell trainfleet the task makes progress (``$TRAINFLEET_HEARTBEAT``, where set)."""
    heartbeat = os.environ.get(HEARTBEAT_VARIABLE)
    if heartbeat:
        Path(heartbeat).touch()


def _is_committed(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def _sync_tree(folder: Path) -> None:
    """Every file of the step on disk before its marker is."""
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                descriptor = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        _sync_dir(Path(root))


def _sync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
