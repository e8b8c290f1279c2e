"""Environments by digest under the data directory, each built once, shared, evicted LRU.

``<root>/<digest>/`` is the environment, ready once ``<root>/<digest>.ready`` exists (it
holds the size); ``<root>/<digest>.lock`` is locked exclusively to build or delete it,
and shared by every job that uses it, in any process on the machine, for as long as the
job runs. A build is made in place (a virtual environment cannot move) and marked ready
only at its end: one found without its mark, a build cut short, is built again.

Under a server that isolates teams, a build runs as an account (``Builders``): a team's
own environment (see ``Recipe.shared``) as that team's, a shared one as an account that
runs no task, so that no task can change what it builds while it builds. Once built, the
environment is taken back (root's, read-only, walked without following a link): no task
can change it afterwards either, and a team's own one is readable by that team alone.
Shared builds run one at a time, and whatever a build left running as the shared builder
(a package's build hook may start a process) is killed before the next: no build can
change another.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainfleet.datadir.files import fresh_dir, own_tree, remove, write_new
from trainfleet.domain.errors import Misconfigured
from trainfleet.environments.build import (
    POLL,
    Builder,
    BuildStopped,
    build,
    end_processes_of,
)
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


@dataclass(frozen=True)
class Builders:
    """Who builds, where tasks run as their team's account."""

    team: Builder
    """The job's team's account: its own environments."""
    shared: Builder
    """An account no task runs as: environments every team may use."""

    def of(self, recipe: Recipe) -> Builder:
        return self.shared if recipe.shared else self.team


class EnvironmentCache:
    """Environments under ``root``, about ``size`` bytes of them kept."""

    def __init__(self, root: Path, size: int = DEFAULT_SIZE) -> None:
        self.root = root
        self.size = size

    def lease(
        self,
        recipe: Recipe,
        log: Path,
        builders: Builders | None = None,
        workdir: Path | None = None,
        stop: Callable[[], bool] = lambda: False,
    ) -> Lease:
        """The environment of ``recipe``, built (output appended to ``log``) unless cached,
        as one of ``builders`` where given (else as this process); a team's own one in
        ``workdir`` (its job's folder: a relative path in its requirements names a file
        there). ``stop``: asked while it waits or builds; True ends that at once.

        Waits while another job builds the same one. Raises BuildFailed, or BuildStopped
        once ``stop`` said so (nothing left, either way).
        """
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if builders is not None:  # their tasks pass through to the environments they use
            os.chmod(self.root, 0o711)
        digest = recipe.digest
        path, ready = self.root / digest, self.root / f"{digest}.ready"
        lock = os.open(self.root / f"{digest}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        started = time.monotonic()
        try:
            _flock(lock, fcntl.LOCK_SH, stop)  # as every job that uses it holds it
            built = False
            if not ready.exists():
                _flock(lock, fcntl.LOCK_EX, stop)  # to build it: others wait, then use it
                built = not ready.exists()
            if built:
                builder = builders.of(recipe) if builders is not None else None
                cwd = None if recipe.shared else workdir
                shared_build = builder is not None and recipe.shared
                with self._alone(stop) if shared_build else contextlib.nullcontext():
                    self._build(recipe, path, log, builder, cwd, stop)
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

    def _build(
        self,
        recipe: Recipe,
        path: Path,
        log: Path,
        builder: Builder | None,
        cwd: Path | None,
        stop: Callable[[], bool],
    ) -> None:
        """Build ``recipe`` at ``path`` (what a build cut short left there goes first)."""
        requirements = self.root / f"{recipe.digest}.requirements"
        cache = self.root / f"{recipe.digest}.uv"  # a builder's own, gone with its build
        group = builder.gid if builder is not None else None
        fresh_dir(path)
        remove(requirements)
        remove(cache)
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            if recipe.requirements:
                write_new(
                    requirements.parent,
                    requirements.name,
                    recipe.requirements.encode(),
                    mode=0o640 if builder else 0o600,
                    group=group,
                )
            if builder is not None:
                own_tree(path, builder.uid, builder.gid, mode=0o700)
                fresh_dir(cache)
                own_tree(cache, builder.uid, builder.gid, mode=0o700)
            with open(log, "ab") as output:
                output.write(f"building {recipe.describe()}\n".encode())
                try:
                    build(
                        recipe,
                        path,
                        output,
                        requirements if recipe.requirements else None,
                        builder,
                        cache if builder is not None else None,
                        cwd,
                        stop,
                    )
                finally:
                    if builder is not None and recipe.shared:  # nothing of it lives on
                        end_processes_of(builder.uid)
            if builder is not None:  # ours again, and no task's to change
                shared = recipe.shared
                gid = os.getgid() if shared else builder.gid
                own_tree(path, os.getuid(), gid, mode=0o755 if shared else 0o750, read_only=True)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        finally:
            remove(requirements)
            remove(cache)

    @contextlib.contextmanager
    def _alone(self, stop: Callable[[], bool]) -> Iterator[None]:
        """Hold the lock of shared builds (one at a time, in every process)."""
        lock = os.open(
            self.root / "shared-builds.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        try:
            _flock(lock, fcntl.LOCK_EX, stop)
            yield
        finally:
            os.close(lock)

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


def _flock(descriptor: int, mode: int, stop: Callable[[], bool]) -> None:
    """Take ``mode`` of the lock, waiting as long as it takes unless ``stop`` says so
    (BuildStopped)."""
    while True:
        try:
            fcntl.flock(descriptor, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if stop():
                raise BuildStopped("stopped while another job built the same environment") from None
            time.sleep(POLL)


def cache_size(value: str | None, source: str = SIZE_VARIABLE) -> int:
    """Bytes in ``value`` (``20Gi``), the default when None or empty; Misconfigured
    naming the setting."""
    try:
        return size_setting(value, source, DEFAULT_SIZE)
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
