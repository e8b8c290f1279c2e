"""What a job's directory sends: ignore rules as git reads them, the cap, the digest."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from trainfleet.workdirs.ignore import BadIgnoreFile
from trainfleet.workdirs.pack import WorkdirTooLarge, pack, select
from trainfleet.workdirs.tree import digest, walk


def _tree(top: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = top / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return top


def test_ignore_files_are_read_as_git_reads_them(tmp_path: Path) -> None:
    top = _tree(
        tmp_path,
        {
            ".gitignore": "*.ckpt\n!best.ckpt\ndata/\n",
            ".trainfleetignore": "notes.txt\n",
            "train.py": "",
            "a.ckpt": "",
            "best.ckpt": "",
            "notes.txt": "",
            "data/big.bin": "",
            "sub/.gitignore": "!keep.ckpt\nlocal.py\n",
            "sub/keep.ckpt": "",
            "sub/other.ckpt": "",
            "sub/local.py": "",
            "sub/model.py": "",
            ".git/HEAD": "",
        },
    )
    (top / "link").symlink_to("train.py")
    (top / "venv").symlink_to("/opt/venv")  # leads out: cannot be sent as it is
    (top / "sub" / "up").symlink_to("../../elsewhere")
    left_out: list[str] = []
    assert sorted(select(top, left_out)) == [
        ".gitignore",
        ".trainfleetignore",
        "best.ckpt",
        "link",
        "sub/.gitignore",
        "sub/keep.ckpt",
        "sub/model.py",
        "train.py",
    ]
    assert sorted(left_out) == ["sub/up", "venv"]


def test_a_bad_pattern_names_the_file_and_line(tmp_path: Path) -> None:
    _tree(tmp_path, {"sub/.trainfleetignore": "ok.txt\n\na/***/b\\\n"})
    with pytest.raises(BadIgnoreFile, match=r"sub/.trainfleetignore:3: .*a/\*\*\*/b"):
        select(tmp_path)


def test_over_the_cap_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    top = _tree(tmp_path / "job", {"train.py": "x" * 2048, "big.bin": "y" * 4096})
    archive = tmp_path / "out.tar.gz"
    with pytest.raises(WorkdirTooLarge, match=r"holds 0.01 MiB to send, over the cap"):
        pack(top, 4096, archive)
    assert not archive.exists()
    (top / ".trainfleetignore").write_text("big.bin\n")
    packed = pack(top, 4096, archive)
    assert packed.files == 2 and packed.size == 2048 + len("big.bin\n")
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == [".trainfleetignore", "train.py"]


def test_digest_is_the_same_for_the_same_tree_only(tmp_path: Path) -> None:
    first = _tree(tmp_path / "a", {"x.py": "1", "d/y.py": "2"})
    second = _tree(tmp_path / "b", {"d/y.py": "2", "x.py": "1"})
    assert digest(first, walk(first)) == digest(second, walk(second))
    (second / "x.py").write_text("changed")
    assert digest(first, walk(first)) != digest(second, walk(second))
    (second / "x.py").write_text("1")
    (second / "x.py").chmod(0o755)
    assert digest(first, walk(first)) != digest(second, walk(second))
