"""The server's side: job directories stored by owner and digest, and a copy for each job.

A tree is its owner's: a team's (``teams/<team>/<digest>``), or the administrators'
(``admin/<digest>``). A digest names nothing for another owner, so knowing one (it is no
secret: it is the digest of files) never reaches another team's files; the same tree sent
by two teams is stored for each (hard links: stored trees are never written). Its files
are owner-only (the server's), and so is the marker beside a job's copy; the job's own
copy is what its tasks get.

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
import stat
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

from trainfleet.datadir.files import write_new
from trainfleet.datadir.space import DiskFull
from trainfleet.domain.errors import BadInput
from trainfleet.workdirs.pack import WorkdirTooLarge
from trainfleet.workdirs.tree import digest, walk

DIGEST = re.compile(r"^[0-9a-f]{64}$")
TEAM = re.compile(r"^[a-z0-9][a-z0-9._-]{0,252}$")
"""A team name that is safe as a folder name (every name the server takes is)."""
ADMINS = "admin"
"""The owner of trees that administrators send."""
TREE_MARKER = "workdir.tree"
"""Beside a job's copy: its tree, ``<owner>/<digest>`` (kept while the job is; owner-only)."""
ARCHIVE = ".tar.gz"
"""Beside a tree sent to Pods: its archive (``WorkdirStore.archive``)."""
SWEEP_AFTER = 3600.0
"""Seconds a tree no job uses is kept, for the submission that follows its upload."""


class BadArchive(BadInput):
    """An uploaded job directory that cannot be stored as sent; the message says why."""


def owner(team: str | None) -> str:
    """Whose trees a caller sends and uses: ``teams/<team>``, or ``admin`` (None)."""
    if team is None:
        return ADMINS
    if not TEAM.match(team):
        raise BadInput(f"team: {team!r} cannot own a job directory (not a plain name)")
    return f"teams/{team}"


def whose(owner: str) -> str:
    """``team 'vision'`` or ``the administrators``, for messages."""
    return "the administrators" if owner == ADMINS else f"team {owner.removeprefix('teams/')!r}"


class WorkdirStore:
    """Trees by owner and digest under ``root``, each unpacked at most ``cap`` bytes."""

    def __init__(self, root: Path, cap: int) -> None:
        self.root = root
        self.cap = cap

    def path(self, owner: str, tree: str) -> Path:
        if not DIGEST.match(tree):
            raise BadArchive(f"tree {tree!r} is not a sha256 digest (64 hex digits)")
        if owner != ADMINS and not (owner.startswith("teams/") and TEAM.match(owner[6:])):
            raise ValueError(f"not an owner of trees: {owner!r}")
        return self.root / owner / tree

    def has(self, owner: str, tree: str) -> bool:
        return self.path(owner, tree).is_dir()

    def add(self, owners: Sequence[str], tree: str, archive: IO[bytes]) -> bool:
        """Store the tree sent as ``archive`` (tar, gzip) under its digest ``tree``, for
        each of ``owners`` that lacks it.

        Returns False where each had it already. Raises BadArchive (nothing stored) for
        an archive that is broken, holds what it may not, or is not the tree it names,
        and WorkdirTooLarge past the cap.
        """
        lacking = [self.path(name, tree) for name in owners if not self.has(name, tree)]
        if not lacking:
            return False
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging = Path(tempfile.mkdtemp(prefix=".upload-", dir=self.root))
        try:
            self._unpack(archive, staging)
            found = digest(staging, walk(staging))
            if found != tree:
                raise BadArchive(f"the archive holds tree {found}, not {tree} as it says")
            _owner_only(staging)
            return any([self._place(staging, final) for final in lacking])
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _place(self, staging: Path, final: Path) -> bool:
        """A whole tree at ``final``, of hard links to ``staging``'s files; False where
        another upload of the same tree put it there meanwhile."""
        final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        linked = Path(tempfile.mkdtemp(prefix=".upload-", dir=self.root))
        try:
            shutil.copytree(staging, linked, symlinks=True, copy_function=_link, dirs_exist_ok=True)
            try:
                os.rename(linked, final)
            except OSError:  # stored meanwhile by another upload of the same tree
                if not final.is_dir():
                    raise
                return False
            return True
        finally:
            shutil.rmtree(linked, ignore_errors=True)

    def copy(self, owner: str, tree: str, destination: Path) -> None:
        """A copy of the owner's tree at ``destination``, a job's own (edits stay there),
        with ``<owner>/<digest>`` beside it (``TREE_MARKER``) while the job is kept."""
        source = self.path(owner, tree)
        if not source.is_dir():
            raise BadArchive(
                f"tree: no stored tree {tree} of {whose(owner)}: send it first "
                f"(PUT /api/v1/workdirs/{tree})"
            )
        shutil.copytree(source, destination, symlinks=True)
        write_new(destination.parent, TREE_MARKER, f"{owner}/{tree}".encode())  # 0600
        os.utime(source)  # used now: swept last

    def archive(self, stored: str) -> Path:
        """The tree ``stored`` (``<owner>/<digest>``, as a job's marker names it) as a
        tar.gz for a job's Pods to unpack, made once beside it and kept as long as the tree:
        its files readable by anyone (0644, 0755 where executable), owned by whoever
        unpacks them. DiskFull where it does not fit."""
        owner_name, _, tree = stored.rpartition("/")
        top = self.path(owner_name, tree)
        made = top.with_name(top.name + ARCHIVE)
        if made.is_file():
            return made
        handle, name = tempfile.mkstemp(dir=top.parent, prefix=".archive-")  # 0600
        try:
            with (
                os.fdopen(handle, "wb") as out,
                tarfile.open(fileobj=out, mode="w:gz", compresslevel=1) as tar,
            ):
                for path in sorted(walk(top)):
                    tar.add(top / path, arcname=path, recursive=False, filter=_for_anyone)
        except BaseException as error:
            os.unlink(name)
            if isinstance(error, OSError) and error.errno == errno.ENOSPC:
                raise DiskFull(f"no room to send the job's directory: {error}") from None
            raise
        os.replace(name, made)  # whole, or not there (0600: the server's)
        return made

    def sweep(self, used: Iterable[str], after: float = SWEEP_AFTER) -> list[str]:
        """Delete the trees that no job in ``used`` (markers' texts) was copied from, and
        that nothing sent or used for ``after`` seconds; returns them (``<owner>/<digest>``,
        or a bare digest: a tree stored before trees had owners, which nobody can use)."""
        keep, now = set(used), time.time()
        gone = []
        for name, path in self._trees():
            if name in keep:
                continue
            if now - path.stat().st_mtime >= after:
                shutil.rmtree(path, ignore_errors=True)
                path.with_name(path.name + ARCHIVE).unlink(missing_ok=True)
                gone.append(name)
        for left in self.root.glob("**/.archive-*"):  # a server stopped while it made one
            if now - left.stat().st_mtime >= after:
                left.unlink(missing_ok=True)
        return gone

    def _trees(self) -> Iterator[tuple[str, Path]]:
        """Every stored tree, named as its marker names it."""
        folders = [(f"{ADMINS}/", self.root / ADMINS)]
        folders += [(f"teams/{team.name}/", team) for team in (self.root / "teams").glob("*")]
        folders.append(("", self.root))
        for prefix, folder in folders:
            for path in folder.glob("*"):
                if DIGEST.match(path.name):
                    yield f"{prefix}{path.name}", path

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


def _owner_only(top: Path) -> None:
    """Make a tree's folders 0700 and its files 0600 (0700 where executable): the
    server's alone. Links are left as they are (their own mode means nothing)."""
    for folder, _, files in os.walk(top):  # not into links
        os.chmod(folder, 0o700)
        for name in files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, 0o700 if mode & 0o111 else 0o600)


def _for_anyone(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    if member.isreg():
        member.mode = 0o755 if member.mode & 0o100 else 0o644
    return member


def _link(source: str, destination: str) -> None:
    """Hard-link a stored file (never written once stored); copy it where links fail."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
