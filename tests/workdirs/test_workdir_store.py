"""The server's store of job directories: once by digest, whole or not at all, and no
archive member may land outside its tree."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import pytest

from trainfleet.workdirs.pack import WorkdirTooLarge, pack
from trainfleet.workdirs.store import TREE_MARKER, BadArchive, WorkdirStore


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


def test_stored_once_and_copied_for_each_job(tmp_path: Path) -> None:
    top = tmp_path / "job"
    top.mkdir()
    (top / "train.py").write_text("print('hi')\n")
    tree, archive = _packed(top, tmp_path)
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    assert store.add(tree, io.BytesIO(archive)) is True
    assert store.add(tree, io.BytesIO(archive)) is False  # the same tree: stored once
    assert [p.name for p in (tmp_path / "trees").iterdir()] == [tree]

    copy = tmp_path / "jobs" / "j1" / "workdir"
    store.copy(tree, copy)
    (copy / "train.py").write_text("edited in the job\n")
    assert (store.path(tree) / "train.py").read_text() == "print('hi')\n"
    assert (copy.parent / TREE_MARKER).read_text() == tree


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
        store.add("0" * 64, io.BytesIO(_archive(*members)))
    assert list((tmp_path / "trees").iterdir()) == []
    assert not (tmp_path / "evil").exists()


def test_broken_mislabelled_and_oversized_archives_store_nothing(tmp_path: Path) -> None:
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    with pytest.raises(BadArchive, match=r"not a readable tar.gz archive"):
        store.add("0" * 64, io.BytesIO(b"not gzip at all"))
    with pytest.raises(BadArchive, match=r"the archive holds tree .*, not 0{64}"):
        store.add("0" * 64, io.BytesIO(_archive(_file("a.py"))))
    bomb = _archive(_file("zeros.bin", b"\0" * (2 << 20)))  # 2 MiB of zeros: a few KB sent
    assert len(bomb) < 10_000
    with pytest.raises(WorkdirTooLarge, match="unpacks to more than the server's cap"):
        store.add("1" * 64, io.BytesIO(bomb))
    with pytest.raises(BadArchive, match="is not a sha256 digest"):
        store.add("../x", io.BytesIO(b""))
    assert list((tmp_path / "trees").iterdir()) == []


def test_sweep_keeps_used_and_recent_trees(tmp_path: Path) -> None:
    store = WorkdirStore(tmp_path / "trees", 1 << 20)
    trees = []
    for text in ("a", "b", "c"):
        top = tmp_path / text
        top.mkdir()
        (top / "f").write_text(text)
        tree, archive = _packed(top, tmp_path)
        store.add(tree, io.BytesIO(archive))
        trees.append(tree)
    old = time.time() - 7200
    for tree in trees[:2]:
        import os

        os.utime(store.path(tree), (old, old))
    assert store.sweep(used=[trees[0]]) == [trees[1]]  # used, gone, too recent
    assert sorted(p.name for p in (tmp_path / "trees").iterdir()) == sorted([trees[0], trees[2]])
