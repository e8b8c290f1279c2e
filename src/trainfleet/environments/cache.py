"""Environments by digest under the data directory, each built once, shared, evicted LRU.

``<root>/<digest>/`` is the environment, ready once ``<root>/<digest>.ready`` exists (it
holds the size); ``<root>/<digest>.lock`` is locked exclusively to build or delete it,
and shared by every job that uses it, in any process on the machine, for as long as the
job runs. A build is made in place (a virtual environment cannot move) and marked ready
only at its end: one found without its mark, a build cut short, is built again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainfleet.domain.errors import Misconfigured
from trainfleet.environments.build import build
from trainfleet.environments.recipe import Recipe
from trainfleet.spec.quantity import size_setting

DEFAULT_SIZE = 20 << 30
"""Bytes of environments kept (those in use are never evicted, whatever their size)."""
SIZE_VARIABLE = "TRAINFLEET_ENVIRONMENT_CACHE"


@dataclass
class Lease:
    """An environment a job uses: kept from eviction until ``release``."""

    path: Path
    built: bool
    """Built for this job now (False: it was in the cache)."""
    seconds: float
    _lock: int = field(repr=False, default=-1)

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    def release(self) -> None:
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1


class EnvironmentCache:
    """Environments under ``root``, about ``size`` bytes of them kept."""

    def __init__(self, root: Path, size: int = DEFAULT_SIZE) -> None:
        self.root = root
        self.size = size

    def lease(self, recipe: Recipe, log: Path) -> Lease:
        """The environment of ``recipe``, built (output appended to ``log``) unless cached.

        Waits while another job builds the same one. Raises BuildFailed (nothing left).
        """
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        digest = recipe.digest
        path, ready = self.root / digest, self.root / f"{digest}.ready"
        lock = os.open(self.root / f"{digest}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        started = time.monotonic()
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)  # as every job that uses it holds it
            built = False
            if not ready.exists():
                fcntl.flock(lock, fcntl.LOCK_EX)  # to build it: others wait, then use it
                built = not ready.exists()
            if built:
                shutil.rmtree(path, ignore_errors=True)  # a build cut short, if any
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "ab") as output:
                    output.write(f"building {recipe.describe()}\n".encode())
                    try:
                        build(recipe, path, output)
                    except BaseException:
                        shutil.rmtree(path, ignore_errors=True)
                        raise
                ready.write_text(str(_size(path)))
            os.utime(ready)  # used now: evicted last
            fcntl.flock(lock, fcntl.LOCK_SH)  # others may use it too; none may delete it
        except BaseException:
            os.close(lock)
            raise
        lease = Lease(path, built, time.monotonic() - started, lock)
        if built:
            self.evict()
        return lease

    def evict(self) -> list[str]:
        """Delete the least recently used environments no job holds, until the rest fit."""
        marks = sorted(self.root.glob("*.ready"), key=lambda mark: mark.stat().st_mtime)
        sizes = {mark: int(mark.read_text() or 0) for mark in marks}
        total, gone = sum(sizes.values()), []
        for mark in marks:
            if total <= self.size:
                break
            digest = mark.name.removesuffix(".ready")
            lock = os.open(self.root / f"{digest}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(lock)
                continue  # in use
            try:
                mark.unlink()
                shutil.rmtree(self.root / digest, ignore_errors=True)
                total -= sizes[mark]
                gone.append(digest)
            finally:
                os.close(lock)
        return gone


def cache_size(value: str | None = None) -> int:
    """Bytes in ``value`` (``20Gi``; TRAINFLEET_ENVIRONMENT_CACHE when None), else the
    default; Misconfigured naming the setting."""
    try:
        return size_setting(value, SIZE_VARIABLE, DEFAULT_SIZE)
    except ValueError as error:
        raise CacheSizeError(f"{error} (--environment-cache)") from None


class CacheSizeError(Misconfigured):
    """TRAINFLEET_ENVIRONMENT_CACHE (or ``--environment-cache``) is not a size."""


def _size(path: Path) -> int:
    return sum(
        os.lstat(os.path.join(folder, name)).st_size
        for folder, _, files in os.walk(path)
        for name in files
    )
