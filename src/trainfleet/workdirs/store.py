"""The server's side: job directories stored once by digest, and a copy for each job.

A tree is unpacked into a temporary folder beside the others and renamed into place only
once it is whole and its digest checked, so a tree under its digest is always complete.
What an archive may hold is what Python's ``data`` extraction filter allows (no absolute
paths, no ``..``, no links leading out, no devices), within the unpacked-size cap.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from trainfleet.domain.errors import BadInput
from trainfleet.store.space import DiskFull
from trainfleet.workdirs.pack import WorkdirTooLarge
from trainfleet.workdirs.tree import digest, walk

DIGEST = re.compile(r"^[0-9a-f]{64}$")
TREE_MARKER = "workdir.tree"
"""Beside a job's copy: the digest of the tree it was copied from (kept while the job is)."""
SWEEP_AFTER = 3600.0
"""Seconds a tree no job uses is kept, for the submission that follows its upload."""


class BadArchive(BadInput):
    """An uploaded job directory that cannot be stored as sent; the message says why."""


class WorkdirStore:
    """Trees by digest under ``root``, each unpacked at most ``cap`` bytes."""

    def __init__(self, root: Path, cap: int) -> None:
        self.root = root
        self.cap = cap

    def path(self, tree: str) -> Path:
        if not DIGEST.match(tree):
            raise BadArchive(f"tree {tree!r} is not a sha256 digest (64 hex digits)")
        return self.root / tree

    def has(self, tree: str) -> bool:
        return self.path(tree).is_dir()

    def add(self, tree: str, archive: IO[bytes]) -> bool:
        """Store the tree sent as ``archive`` (tar, gzip) under its digest ``tree``.

        Returns False where it was stored already. Raises BadArchive (nothing stored) for
        an archive that is broken, holds what it may not, or is not the tree it names,
        and WorkdirTooLarge past the cap.
        """
        final = self.path(tree)
        if final.is_dir():
            return False
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = Path(tempfile.mkdtemp(prefix=".upload-", dir=self.root))
        try:
            self._unpack(archive, staging)
            found = digest(staging, walk(staging))
            if found != tree:
                raise BadArchive(f"the archive holds tree {found}, not {tree} as it says")
            try:
                os.rename(staging, final)
            except OSError:  # stored meanwhile by another upload of the same tree
                if not final.is_dir():
                    raise
                return False
            return True
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def copy(self, tree: str, destination: Path) -> None:
        """A copy of the tree at ``destination``, a job's own (edits stay there), with the
        tree's digest beside it (``TREE_MARKER``) while the job is kept."""
        source = self.path(tree)
        if not source.is_dir():
            raise BadArchive(f"no stored tree {tree}: upload it first (PUT /workdirs/{tree})")
        shutil.copytree(source, destination, symlinks=True)
        (destination.parent / TREE_MARKER).write_text(tree)
        os.utime(source)  # used now: swept last

    def sweep(self, used: Iterable[str], after: float = SWEEP_AFTER) -> list[str]:
        """Delete the trees that no job in ``used`` was copied from, and that nothing
        sent or used for ``after`` seconds; returns their digests."""
        keep, now = set(used), time.time()
        gone = []
        for path in self.root.glob("*"):
            if not DIGEST.match(path.name) or path.name in keep:
                continue
            if now - path.stat().st_mtime >= after:
                shutil.rmtree(path, ignore_errors=True)
                gone.append(path.name)
        return gone

    def _unpack(self, archive: IO[bytes], into: Path) -> None:
        unpacked = 0
        try:
            with tarfile.open(fileobj=archive, mode="r:gz") as tar:
                for member in tar:
                    unpacked += max(member.size, 0)
                    if unpacked > self.cap:
                        raise WorkdirTooLarge(
                            f"the job's directory unpacks to more than the server's cap of "
                            f"{self.cap / 2**20:.2f} MiB"
                        )
                    if member.name.startswith("/"):  # the filter would make it relative
                        raise tarfile.AbsolutePathError(member)
                    tar.extract(member, into, filter="data")
        except tarfile.FilterError as error:
            raise BadArchive(f"refused archive member {error.tarinfo.name!r}: {error}") from None
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
            raise BadArchive(f"not a readable tar.gz archive: {error}") from None
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise DiskFull(f"no room to store the job's directory: {error}") from None
            raise
