"""Every CLI command that talks to a server reaches one served over HTTPS with a private CA.

A `trainfleet server` serves HTTPS with a certificate that a CA made here signed. The
README's team setup and a job's whole life are walked with the real CLI, configured by
TRAINFLEET_SERVER, TRAINFLEET_TOKEN and TRAINFLEET_CA_CERT only: each command succeeds.
Without the CA each fails with one line saying why and what to pass, exit code 2. The
commands are read from the click groups, so a new one that is not walked fails the test
until it is walked here (or named in LOCAL, with why it needs no server).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from helpers import trainfleet
from server.harness import ServerProcess
from server.test_tls import Pki, make_pki

from trainfleet.cli.main import cli

TOKEN = "https-cli-walk-admin-token-long-enough"
SECRET_VALUE = "wandb-value-never-shown-9f3c"
TINY = (
    "name: tiny\n"
    "roles:\n"
    "  worker:\n"
    "    command: echo hello from tiny $WANDB_API_KEY\n"
    "    env: {WANDB_API_KEY: {secret: wandb, key: api-key}}\n"
)
SLEEPER = "name: sleeper\nroles:\n  worker: {command: 'echo up; sleep 120'}\n"
FLOW = (
    "kind: Workflow\nname: nightly\nsteps:\n"
    "  a: {job: {roles: {worker: {command: 'true'}}}}\n"
    "  b: {job: {roles: {worker: {command: 'sleep 120'}}}, needs: [a]}\n"
)
YEARLY = (
    "kind: Workflow\nname: yearly\nschedule: {cron: '0 0 1 1 *'}\n"
    "steps:\n  a: {job: {roles: {worker: {command: 'true'}}}}\n"
)

LOCAL = {
    ("server",): "is the server",
    ("_runner",): "runs an embedded job stored on this machine",
    ("token", "create"): "works on the server's store, where it runs",
    ("token", "list"): "works on the server's store, where it runs",
    ("token", "revoke"): "works on the server's store, where it runs",
    ("secret", "rotate-key"): "works on the server's data directory, where it runs",
    ("export",): "prints a manifest of a job file",
    ("schema",): "prints the job files' JSON Schema",
    ("tf-server",): "is a task's TensorFlow server",
    ("ui",): "serves this machine's data directory (with a server, it names the server's page)",
    ("tensorboard",): "serves this machine's folders (with a server, it prints each job's "
    "address: tests/cli/test_tensorboard_command.py)",
    ("workflow", "run"): "runs a workflow's steps on this machine's engine, in the foreground",
}
"""Commands that never talk to a trainfleet server, and why."""


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every command under ``group``, as the words that name it (``team add``)."""
    found: set[tuple[str, ...]] = set()
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        path = (*prefix, name)
        found |= commands(command, path) if isinstance(command, click.Group) else {path}
    return found


def command_of(args: tuple[str, ...]) -> tuple[str, ...]:
    """The command that ``args`` (without global options) run."""
    command = cli.get_command(click.Context(cli), args[0])
    return (args[0], args[1]) if isinstance(command, click.Group) else (args[0],)


class Walk:
    """The real CLI against one server with only the three variables set; remembers each
    command it ran (with whose token) to run it again without the CA."""

    def __init__(self, server: str, ca: Path, home: Path) -> None:
        self.server, self.ca, self.home = server, ca, home
        self.done: list[tuple[str, tuple[str, ...]]] = []
        self.outputs: list[str] = []

    def env(self, token: str, ca: Path | None) -> dict[str, str]:
        """This process's environment without any trainfleet or TLS setting, then the
        server, the token and (when given) the CA; no config file."""
        kept = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("TRAINFLEET_", "SSL_CERT_", "REQUESTS_CA", "CURL_CA"))
        }
        kept |= {"XDG_CONFIG_HOME": str(self.home / "config"), "HOME": str(self.home)}
        kept |= {"TRAINFLEET_SERVER": self.server, "TRAINFLEET_TOKEN": token}
        return kept | ({"TRAINFLEET_CA_CERT": str(ca)} if ca is not None else {})

    def run(
        self, token: str, *args: str, ca: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            trainfleet(*args),
            capture_output=True,
            text=True,
            timeout=180,
            cwd=cwd or self.home,
            env=self.env(token, self.ca if ca else None),
        )
        self.outputs += [done.stdout, done.stderr]
        return done

    def ok(self, token: str, *args: str, cwd: Path | None = None) -> str:
        """Run ``args``; they must succeed without a traceback. Their standard output."""
        done = self.run(token, *args, cwd=cwd)
        assert done.returncode == 0, f"trainfleet {' '.join(args)}:\n{done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr
        self.done.append((token, args))
        return done.stdout


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("https") / "data",
        {"TRAINFLEET_ADMIN_TOKEN": TOKEN, "TRAINFLEET_GPUS": "0"},  # one GPU to clear
        ["--tls-cert", str(pki.cert), "--tls-key", str(pki.key)],
    )
    yield process
    process.stop()


def project(folder: Path, name: str, text: str) -> Path:
    """A job folder holding ``job.yaml``; the job file's path."""
    (folder / name).mkdir(parents=True)
    job = folder / name / "job.yaml"
    job.write_text(text)
    return job


def walk_readme(walk: Walk, tmp_path: Path) -> None:
    """The README's team setup, then a job's whole life, as admin, ana (team-admin of
    vision) and bo (a member of vision)."""
    walk.ok(TOKEN, "team", "create", "vision")
    ana = walk.ok(TOKEN, "user", "create", "ana", "--team", "vision", "--role", "team-admin")
    ana = ana.strip().splitlines()[-1]
    bo = walk.ok(TOKEN, "user", "create", "bo", "--team", "vision").strip().splitlines()[-1]
    walk.ok(TOKEN, "user", "create", "carl")
    assert "admin" in walk.ok(TOKEN, "whoami")
    assert "ana" in walk.ok(TOKEN, "user", "list")
    assert "vision" in walk.ok(TOKEN, "team", "list")

    assert "team-admin of vision" in walk.ok(ana, "whoami")
    walk.ok(ana, "queue", "create", "vision", "--nominal", "gpu=8")
    assert "vision" in walk.ok(ana, "queue", "list")
    walk.ok(ana, "queue", "describe", "vision")
    assert "carl (viewer)" in walk.ok(ana, "team", "add", "vision", "carl", "--role", "viewer")
    walk.ok(ana, "team", "remove", "vision", "carl")
    walk.ok(ana, "secret", "create", "wandb", "--from-literal", f"api-key={SECRET_VALUE}")
    assert "api-key" in walk.ok(ana, "secret", "list")

    tiny = project(tmp_path, "tiny", TINY)
    job = walk.ok(bo, "submit", str(tiny)).strip()
    assert re.fullmatch(r"tiny-[0-9a-f]{8}", job), job
    assert "hello from tiny ***" in walk.ok(bo, "logs", "--follow", job)
    assert job in walk.ok(bo, "list")
    assert "succeeded" in walk.ok(bo, "describe", job)
    walk.ok(bo, "checkpoints", job)
    walk.ok(bo, "events", job)
    walk.ok(bo, "top", job)
    assert "healthy" in walk.ok(bo, "gpus", "list")
    walk.ok(bo, "delete", job)
    ran = walk.ok(bo, "run", str(tiny), cwd=tiny.parent)
    assert "hello from tiny ***" in ran
    sleeper = walk.ok(bo, "submit", str(project(tmp_path, "sleeper", SLEEPER))).strip()
    assert "cancelled" in walk.ok(ana, "stop", sleeper)
    walk.ok(ana, "delete", sleeper)
    (tmp_path / "notes").mkdir()
    notebook = walk.ok(bo, "notebook", "start", "--no-wait", cwd=tmp_path / "notes").strip()
    assert notebook in walk.ok(bo, "notebook", "list")
    walk.ok(bo, "notebook", "stop", notebook)
    walk_workflows(walk, bo, tmp_path)

    walk.ok(ana, "secret", "delete", "wandb")
    assert "secret.create" in walk.ok(ana, "audit")
    walk.ok(TOKEN, "user", "disable", "bo")
    assert "healthy" in walk.ok(TOKEN, "gpus", "clear", "0")


def walk_workflows(walk: Walk, user: str, tmp_path: Path) -> None:
    """A workflow's life on the server as ``user`` (in one team): a run stopped, retried
    and read, a schedule paused and resumed, both workflows deleted."""
    flow = tmp_path / "flow"
    flow.mkdir()
    (flow / "nightly.yaml").write_text(FLOW)
    (flow / "yearly.yaml").write_text(YEARLY)
    said = walk.ok(user, "workflow", "submit", str(flow / "nightly.yaml"))
    run = said.split()[-2]
    assert re.fullmatch(r"nightly-[0-9a-f]{8}", run), said
    assert "cancelled" in walk.ok(user, "workflow", "stop", run)
    assert "retried" in walk.ok(user, "workflow", "retry", run, "--from", "a")
    assert run in walk.ok(user, "workflow", "show", run)
    assert run in walk.ok(user, "workflow", "runs", "nightly")
    assert "next runs:" in walk.ok(user, "workflow", "submit", str(flow / "yearly.yaml"))
    assert "yearly-" in walk.ok(user, "workflow", "start", "yearly")
    assert "yearly" in walk.ok(user, "workflow", "list")
    assert "paused" in walk.ok(user, "workflow", "pause", "yearly")
    assert "resumed" in walk.ok(user, "workflow", "resume", "yearly")
    assert "active" in walk.ok(user, "workflow", "describe", "yearly")
    walk.ok(user, "workflow", "delete", "yearly")
    walk.ok(user, "workflow", "delete", "nightly")


def test_every_server_command_reaches_an_https_server_with_a_private_ca(
    https_server: ServerProcess, pki: Pki, tmp_path: Path
) -> None:
    """With the CA from TRAINFLEET_CA_CERT every command works; without it each says it
    cannot verify the certificate and to pass the CA, exit code 2, one line."""
    walk = Walk(https_server.url, pki.ca, tmp_path)
    walk_readme(walk, tmp_path)

    talking = commands(cli) - set(LOCAL)
    assert set(LOCAL) <= commands(cli), "LOCAL names a command that is gone"
    walked = {command_of(args) for _, args in walk.done}
    assert walked == talking, f"not walked over HTTPS: {sorted(talking - walked)}"
    assert not [text for text in walk.outputs if SECRET_VALUE in text]

    refused = f"error: cannot verify the server's certificate ({https_server.url}): "
    for token, args in walk.done:
        done = walk.run(token, *args, ca=False)
        said = f"trainfleet {' '.join(args)} without the CA:\n{done.stdout}{done.stderr}"
        assert done.returncode == 2, said
        assert done.stderr.startswith(refused), said
        assert done.stderr.endswith("; pass --ca-cert or set TRAINFLEET_CA_CERT\n"), said
        assert len(done.stderr.splitlines()) == 1, said


@pytest.mark.parametrize("command", [("whoami",), ("audit",), ("secret", "list")])
def test_the_ca_flag_is_heard_by_the_account_commands(
    https_server: ServerProcess, pki: Pki, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """``--ca-cert`` (no variable) reaches the server for the commands that forgot it."""
    walk = Walk(https_server.url, pki.ca, tmp_path)
    done = walk.run(TOKEN, "--ca-cert", str(pki.ca), *command, ca=False)
    assert done.returncode == 0, done.stderr
