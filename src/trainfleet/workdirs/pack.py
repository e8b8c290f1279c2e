"""The client's side: the files of a job's directory that go, and their archive."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from trainfleet.domain.errors import BadInput

if TYPE_CHECKING:
    from typing_extensions import Buffer
from trainfleet.spec.quantity import size_setting
from trainfleet.workdirs.ignore import IgnoreRules, read_rules
from trainfleet.workdirs.tree import digest

DEFAULT_CAP = 100 << 20
"""Most bytes of files a job's directory may send, unless the server says otherwise."""


CAP_VARIABLE = "TRAINFLEET_MAX_WORKDIR"


def client_cap(value: str | None) -> int:
    """The cap this client holds a job's directory to: ``value`` (TRAINFLEET_MAX_WORKDIR),
    else 100 MiB."""
    try:
        return size_setting(value, CAP_VARIABLE, DEFAULT_CAP)
    except ValueError as error:
        raise BadInput(str(error)) from None


class WorkdirTooLarge(BadInput):
    """The job's directory, less what its ignore files leave behind, is over the cap."""

    status = 413


@dataclass(frozen=True)
class Packed:
    """A job's directory ready to send: its digest, its archive and what it holds."""

    digest: str
    archive: Path
    files: int
    size: int
    left_out: list[str]
    """Links that lead out of the directory: they cannot be sent as they are."""


def select(top: Path, left_out: list[str] | None = None) -> list[str]:
    """The files and links of ``top`` that its ignore files keep, ``/``-separated; links
    that lead out of ``top`` are not among them (added to ``left_out``).

    Raises BadIgnoreFile for a pattern git could not read.
    """
    chosen: list[str] = []
    resolved_top = top.resolve()
    rules_of = {top: read_rules(top, "", IgnoreRules.empty())}
    for folder, dirs, files in os.walk(top):
        here = Path(folder)
        rules = rules_of.pop(here)
        relative = "" if here == top else here.relative_to(top).as_posix()
        kept_dirs = []
        for name in sorted(dirs):
            path = f"{relative}/{name}" if relative else name
            if (here / name).is_symlink():
                files.append(name)  # a link to a folder goes as a link
            elif not rules.ignored(path, is_dir=True):
                kept_dirs.append(name)
                rules_of[here / name] = read_rules(here / name, path, rules)
        dirs[:] = kept_dirs
        for name in sorted(files):
            path = f"{relative}/{name}" if relative else name
            full = here / name
            if not (full.is_file() or full.is_symlink()) or rules.ignored(path, is_dir=False):
                continue
            target = os.readlink(full) if full.is_symlink() else ""
            if target and not (
                not os.path.isabs(target) and full.resolve().is_relative_to(resolved_top)
            ):
                if left_out is not None:
                    left_out.append(path)
                continue
            chosen.append(path)
    return chosen


def pack(top: Path, cap: int, archive: Path, extra: Mapping[str, bytes] | None = None) -> Packed:
    """Write the kept files of ``top`` to ``archive`` (tar, gzip), with ``extra`` files
    (path: content) in place of any of the same name.

    Raises WorkdirTooLarge, before writing anything, when they hold more than ``cap`` bytes.
    """
    extra = extra or {}
    left_out: list[str] = []
    paths = [path for path in select(top, left_out) if path not in extra]
    size = _check_size(top, paths, extra, cap)
    with (
        open(archive, "wb") as raw,
        _GzipMembers(raw) as gz,
        tarfile.open(fileobj=gz, mode="w|") as tar,
    ):
        for path in paths:
            tar.add(top / path, arcname=path, recursive=False)
        gz.start(level=0)  # extra files (a pickled call) rarely compress: stored
        for path, content in extra.items():
            member = tarfile.TarInfo(path)
            member.size, member.mode, member.mtime = len(content), 0o644, int(time.time())
            tar.addfile(member, io.BytesIO(content))
    return Packed(digest(top, paths, extra), archive, len(paths) + len(extra), size, left_out)


class _GzipMembers(io.RawIOBase):
    """A file that gzips what is written to it into ``raw``, as gzip members one after
    another, each at its own level (one gzip file to any reader: ``tarfile``'s ``r:gz``
    reads every member); 10 MiB of random bytes take 0.3 s at level 1, none at level 0."""

    def __init__(self, raw: BinaryIO, level: int = 1) -> None:
        super().__init__()
        self.raw = raw
        self.member = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level, mtime=0)

    def start(self, level: int) -> None:
        """Go on in a new member at ``level``."""
        self.member.close()  # ends the member; ``raw`` stays open
        self.member = gzip.GzipFile(fileobj=self.raw, mode="wb", compresslevel=level, mtime=0)

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:
        return self.member.write(data)

    def close(self) -> None:
        if not self.closed:
            self.member.close()
        super().close()


def copy_kept(top: Path, target: Path, cap: int, extra: Mapping[str, bytes]) -> None:
    """Copy the kept files of ``top`` into the new folder ``target``, as ``pack`` would send
    them (links that stay inside as links), with ``extra`` files; WorkdirTooLarge as ``pack``."""
    paths = [path for path in select(top) if path not in extra]
    _check_size(top, paths, extra, cap)
    target.mkdir(parents=True)
    for path in paths:
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        if (top / path).is_symlink():
            os.symlink(os.readlink(top / path), target / path)
        else:
            shutil.copy2(top / path, target / path)
    for path, content in extra.items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_bytes(content)


def _check_size(top: Path, paths: list[str], extra: Mapping[str, bytes], cap: int) -> int:
    """The bytes to send; WorkdirTooLarge over ``cap``."""
    size = sum((top / p).lstat().st_size for p in paths if not (top / p).is_symlink())
    size += sum(map(len, extra.values()))
    if size > cap:
        raise WorkdirTooLarge(
            f"the job's directory {top} holds {size / 2**20:.2f} MiB to send, over the cap of "
            f"{cap / 2**20:.2f} MiB: leave large files out with .trainfleetignore or "
            ".gitignore, or run in place with --server-workdir"
        )
    return size
