"""A job's outputs as ``datadir.outputs`` reads them from a folder a hostile task wrote:
plain files by a plain name only; a link, a FIFO, a folder or a bad name is refused or
left out, never followed, opened or waited on; a file past MAX_OUTPUT is refused with its
size. Real files, links and FIFOs in a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainfleet.datadir.files import LinkRefused, open_inside, read_inside
from trainfleet.datadir.layout import MAX_OUTPUT, OUTPUT_NAME
from trainfleet.datadir.outputs import list_outputs, open_output, read_output
from trainfleet.domain.errors import BadInput, NotFound


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """An output folder as a hostile task leaves it: one good output, and the rest."""
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours\n")
    folder = tmp_path / "output"
    folder.mkdir()
    (folder / "result.txt").write_bytes(b"\x00result\xff\n")
    (folder / "evil").symlink_to("/etc/shadow")
    (folder / "secret").symlink_to(outside)
    (folder / "link-dir").symlink_to(tmp_path)
    os.mkfifo(folder / "pipe")
    (folder / "sub").mkdir()
    (folder / "sub" / "inner.txt").write_text("deeper\n")
    (folder / ".hidden").write_text("dot\n")
    (folder / "with space").write_text("space\n")
    return folder


@pytest.mark.timeout(30)  # a FIFO opened for reading would wait for a writer for ever
def test_only_plain_files_with_plain_names_are_listed(planted: Path) -> None:
    found = list_outputs(planted)
    assert [output.name for output in found] == ["result.txt"]
    assert found[0].size == 9 and found[0].modified > 0


@pytest.mark.timeout(30)
def test_links_fifos_and_folders_are_no_outputs(planted: Path) -> None:
    assert read_output(planted, "result.txt") == b"\x00result\xff\n"
    for name in ("evil", "secret", "link-dir", "pipe", "sub", "missing"):
        with pytest.raises(NotFound, match=rf"no output '{name}' \(outputs: result.txt\)"):
            read_output(planted, name)


@pytest.mark.parametrize("name", ["../secret.txt", "sub/inner.txt", ".hidden", "", "..", "a b"])
def test_a_name_that_is_no_plain_file_name_is_refused_naming_the_rule(
    planted: Path, name: str
) -> None:
    assert not OUTPUT_NAME.match(name)
    with pytest.raises(BadInput, match="no output's name: a file name of letters, digits"):
        read_output(planted, name)


def test_an_output_larger_than_the_limit_is_refused_with_its_size(tmp_path: Path) -> None:
    with open(tmp_path / "huge.bin", "wb") as file:  # sparse: no disk used
        file.truncate(MAX_OUTPUT + 1)
    (tmp_path / "whole.bin").write_bytes(b"x")
    with pytest.raises(BadInput, match=f"holds {MAX_OUTPUT + 1} bytes: more than the 256 MiB"):
        open_output(tmp_path, "huge.bin")
    assert [output.name for output in list_outputs(tmp_path)] == ["huge.bin", "whole.bin"]


def test_a_folder_that_is_missing_or_a_link_has_no_outputs(planted: Path, tmp_path: Path) -> None:
    assert list_outputs(tmp_path / "never-made") == []
    (tmp_path / "linked").symlink_to(planted)
    assert list_outputs(tmp_path / "linked") == []
    with pytest.raises(NotFound, match=r"\(outputs: none\)"):
        read_output(tmp_path / "linked", "result.txt")


@pytest.mark.timeout(30)
def test_open_inside_hands_a_plain_file_only(planted: Path) -> None:
    """``open_inside`` is what ``read_inside`` reads through: the same refusals."""
    descriptor = open_inside(planted, "result.txt")
    os.close(descriptor)
    with pytest.raises(LinkRefused):
        open_inside(planted, "evil")
    with pytest.raises(ValueError, match="not a regular file"):
        open_inside(planted, "pipe")
    with pytest.raises(LinkRefused):
        read_inside(planted, "link-dir/secret.txt", 100)
    assert read_inside(planted, "sub/inner.txt", 100) == b"deeper\n"
    with pytest.raises(ValueError, match="more than 3 bytes"):
        read_inside(planted, "sub/inner.txt", 3)
