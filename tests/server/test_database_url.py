"""`trainfleet server` takes its database URL from a file or the environment, out of `ps`."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from helpers import run_cli

from .harness import ServerProcess


def test_the_url_from_a_file_keeps_the_password_out_of_the_process_list(
    postgres_url: str, tmp_path: Path
) -> None:
    password = urlsplit(postgres_url).password
    assert password, "the test database's URL has a password"
    url_file = tmp_path / "database-url"
    url_file.write_text(f"{postgres_url}\n")
    url_file.chmod(0o600)
    server = ServerProcess(tmp_path / "data", args=["--database-url-file", str(url_file)])
    try:
        argv = Path(f"/proc/{server.process.pid}/cmdline").read_bytes().split(b"\0")
        assert f":{password}@".encode() not in b" ".join(argv)
        assert httpx.get(f"{server.url}/readyz").json() == {"status": "ready"}
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (None, [], "--database-url-file: cannot read"),
        ("", [], "is empty (its first line is the URL)"),
        ("\n\n", [], "is empty"),
        ("sqlite:///x.db", ["--database-url", "sqlite:///y.db"], "give the database URL once"),
    ],
    ids=["missing", "empty", "blank", "twice"],
)
def test_an_unusable_url_file_is_refused_with_exit_code_2(
    tmp_path: Path, content: str | None, extra: list[str], message: str
) -> None:
    url_file = tmp_path / "database-url"
    if content is not None:
        url_file.write_text(content)
    done = run_cli(
        "--data-dir", tmp_path / "data", "server", "--database-url-file", url_file, *extra
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_token_commands_take_the_url_from_a_file_too(postgres_url: str, tmp_path: Path) -> None:
    url_file = tmp_path / "database-url"
    url_file.write_text(f"{postgres_url}\n")
    where = ["--data-dir", tmp_path / "data", "token", "--database-url-file", url_file]
    created = run_cli(*where, "create", "alice")
    assert created.returncode == 0, created.stderr
    listed = run_cli(*where, "list")
    assert listed.returncode == 0 and "alice" in listed.stdout, listed.stderr
    twice = run_cli(*where, "--database-url", postgres_url, "list")
    assert twice.returncode == 2 and "give the database URL once" in twice.stderr
