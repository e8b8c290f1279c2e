"""The server's store of job directories: once per owner and digest, whole or not at all,
owner-only, and no archive member may land outside its tree."""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import tarfile
import time
from pathlib import Path

import pytest
from helpers import fill_disk, tmpfs

from trainfleet.datadir.space import DiskFull
from trainfleet.domain.errors import BadInput
from trainfleet.workdirs.pack import WorkdirTooLarge, pack
from trainfleet.workdirs.store import TREE_MARKER, BadArchive, WorkdirStore, owner


def _packed(top: Path, tmp: Path) -> tuple[str, bytes]:
    packed = pack(top, 1 << 20, tmp / "a.tar.gz")
    return packed.digest, packed.archive.read_bytes()


def _archive(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        for info, content in members:
            tar.addfile(info, io.BytesIO(content) if content else None)
    return data.getvalue()


def _file(name: str, content: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    return info, content


def _link(name: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, b""


VISION, AUDIO, ADMINS = owner("vision"), owner("audio"), owner(None)


def test_stored_once_and_copied_for_each_job(tmp_path: Path) -> None:
    top = tmp_path / "job"
    (top / "bin").mkdir(parents=True)
    (top / "train.py").write_text("print('hi')\n")
    (top / "bin" / "run.sh").write_text("#!/bin/sh\n")
    (top / "bin" / "run.sh").chmod(0o755)
    tree, archive = _packed(top, tmp_path)
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    assert store.add([VISION], tree, io.BytesIO(archive)) is True
    assert store.add([VISION], tree, io.BytesIO(archive)) is False  # stored once
    assert [p.name for p in (tmp_path / "trees" / "teams" / "vision").iterdir()] == [tree]
    modes = {
        p.relative_to(store.path(VISION, tree)).as_posix(): stat.S_IMODE(p.stat().st_mode)
        for p in [store.path(VISION, tree), *store.path(VISION, tree).rglob("*")]
    }
    assert modes == {".": 0o700, "bin": 0o700, "bin/run.sh": 0o700, "train.py": 0o600}

    copy = tmp_path / "jobs" / "j1" / "workdir"
    store.copy(VISION, tree, copy)
    (copy / "train.py").write_text("edited in the job\n")
    assert (store.path(VISION, tree) / "train.py").read_text() == "print('hi')\n"
    marker = copy.parent / TREE_MARKER
    assert marker.read_text() == f"teams/vision/{tree}"
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert os.access(copy / "bin" / "run.sh", os.X_OK)


def test_a_tree_is_its_owners_only(tmp_path: Path) -> None:
    """A tree stored for one team names nothing for another (nor for the administrators);
    the same tree sent by another is stored for it too, and each is whole alone."""
    top = tmp_path / "job"
    top.mkdir()
    (top / "train.py").write_text("print('hi')\n")
    tree, archive = _packed(top, tmp_path)
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    store.add([VISION], tree, io.BytesIO(archive))
    assert not store.has(AUDIO, tree) and not store.has(ADMINS, tree)
    with pytest.raises(BadArchive, match=f"no stored tree {tree} of team 'audio'"):
        store.copy(AUDIO, tree, tmp_path / "jobs" / "j2" / "workdir")
    assert not (tmp_path / "jobs" / "j2").exists()
    assert store.add([VISION, AUDIO, ADMINS], tree, io.BytesIO(archive)) is True
    assert store.has(AUDIO, tree) and store.has(ADMINS, tree)
    shutil.rmtree(store.path(VISION, tree))
    store.copy(AUDIO, tree, tmp_path / "jobs" / "j2" / "workdir")
    assert (tmp_path / "jobs" / "j2" / "workdir" / "train.py").read_text() == "print('hi')\n"
    with pytest.raises(BadInput, match=re.escape("team: '../x' cannot own")):
        owner("../x")


@pytest.mark.parametrize(
    ("members", "problem"),
    [
        ([_file("/etc/evil")], "refused archive member '/etc/evil'"),
        ([_file("../evil")], "refused archive member '../evil'"),
        ([_link("escape", "/etc/passwd")], "refused archive member 'escape'"),
        ([_link("escape", "../../outside")], "refused archive member 'escape'"),
    ],
)
def test_hostile_archives_store_nothing(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]], problem: str
) -> None:
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    with pytest.raises(BadArchive, match=problem):
        store.add([VISION], "0" * 64, io.BytesIO(_archive(*members)))
    assert list((tmp_path / "trees").iterdir()) == []
    assert not (tmp_path / "evil").exists()


def test_broken_mislabelled_and_oversized_archives_store_nothing(tmp_path: Path) -> None:
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    with pytest.raises(BadArchive, match=r"not a readable tar.gz archive"):
        store.add([VISION], "0" * 64, io.BytesIO(b"not gzip at all"))
    with pytest.raises(BadArchive, match=r"the archive holds tree .*, not 0{64}"):
        store.add([VISION], "0" * 64, io.BytesIO(_archive(_file("a.py"))))
    bomb = _archive(_file("zeros.bin", b"\0" * (2 << 20)))  # 2 MiB of zeros: a few KB sent
    assert len(bomb) < 10_000
    with pytest.raises(WorkdirTooLarge, match="unpacks to more than the server's cap"):
        store.add([VISION], "1" * 64, io.BytesIO(bomb))
    with pytest.raises(BadArchive, match="is not a sha256 digest"):
        store.add([VISION], "../x", io.BytesIO(b""))
    assert list((tmp_path / "trees").iterdir()) == []


def test_sweep_keeps_used_and_recent_trees(tmp_path: Path) -> None:
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    trees = []
    for text in ("a", "b", "c"):
        top = tmp_path / text
        top.mkdir()
        (top / "f").write_text(text)
        tree, archive = _packed(top, tmp_path)
        store.add([VISION, AUDIO], tree, io.BytesIO(archive))
        trees.append(tree)
    legacy = tmp_path / "trees" / trees[1]  # stored before trees had owners
    legacy_used = tmp_path / "trees" / trees[0]
    shutil.copytree(store.path(VISION, trees[1]), legacy)
    shutil.copytree(store.path(VISION, trees[0]), legacy_used)
    old = time.time() - 7200
    for path in (store.path(VISION, trees[0]), store.path(AUDIO, trees[0]), legacy, legacy_used):
        os.utime(path, (old, old))
    for tree in trees[1:2]:
        for path in (store.path(VISION, tree), store.path(AUDIO, tree)):
            os.utime(path, (old, old))
    used = [f"teams/vision/{trees[0]}", trees[0]]  # a marker of each kind
    gone = store.sweep(used=used)
    assert sorted(gone) == sorted(
        [f"teams/audio/{trees[0]}", f"teams/audio/{trees[1]}", f"teams/vision/{trees[1]}", trees[1]]
    )
    assert store.has(VISION, trees[0]) and legacy_used.exists() and not legacy.exists()
    assert store.has(VISION, trees[2]) and store.has(AUDIO, trees[2])  # too recent


def test_a_trees_archive_for_pods_is_made_once_and_swept_with_it(tmp_path: Path) -> None:
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    top = tmp_path / "job"
    (top / "bin").mkdir(parents=True)
    (top / "f").write_text("data")
    (top / "bin" / "run").write_text("#!/bin/sh\n")
    (top / "bin" / "run").chmod(0o700)
    tree, archive = _packed(top, tmp_path)
    store.add([VISION], tree, io.BytesIO(archive))
    made = store.archive(f"{VISION}/{tree}")
    assert made == store.path(VISION, tree).with_name(f"{tree}.tar.gz")
    assert made.stat().st_mode & 0o777 == 0o600, "the server's alone"
    with tarfile.open(made) as tar:
        modes = {member.name: member.mode for member in tar}
        assert {m.uid for m in tar.getmembers()} == {0} and {m.uname for m in tar} == {""}
    assert modes == {"bin/run": 0o755, "f": 0o644}, "readable by any user of a Pod"
    inode = made.stat().st_ino
    assert store.archive(f"{VISION}/{tree}").stat().st_ino == inode, "made once"
    left = store.root / "teams" / "vision" / ".archive-left"  # a server killed making one
    left.write_bytes(b"x")
    old = time.time() - 7200
    for path in (store.path(VISION, tree), left):
        os.utime(path, (old, old))
    assert store.sweep(used=[]) == [f"{VISION}/{tree}"]
    assert not made.exists() and not left.exists()


def test_an_archive_that_does_not_fit_leaves_nothing_half_made(tmp_path: Path) -> None:
    """On a real 1 MB tmpfs, filled once the tree is stored."""
    top = tmp_path / "job"
    top.mkdir()
    (top / "noise").write_bytes(os.urandom(300_000))  # does not compress
    tree, archive = _packed(top, tmp_path)
    with tmpfs(tmp_path / "disk", "1m") as disk:
        store = WorkdirStore(disk / "trees", 1 << 20)
        store.add([VISION], tree, io.BytesIO(archive))
        fill_disk(disk / "filler")
        with pytest.raises(DiskFull):
            store.archive(f"{VISION}/{tree}")
        assert sorted(p.name for p in store.path(VISION, tree).parent.iterdir()) == [tree]
        (disk / "filler").unlink()
        assert store.archive(f"{VISION}/{tree}").is_file()
