"""What a member sends never runs, and no link it plants is followed, as root: a package's
build hook runs as the member's team account, a built environment is no task's to
change, and a secret file cannot be turned into root writing where the member chose.

Each attack here succeeded on the code before (issue 23): the build hook wrote uid 0,
and root wrote the secret's value through the task's link on its restart.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import psutil

from security.conftest import TeamServer, start_team_server
from trainfleet.backends.accounts import BUILDER
from trainfleet.client import Client
from trainfleet.domain.records import JobRecord

BACKEND = """\
import os

def _mark():
    with open(os.environ.get("MARK_FILE", "/tmp/unset"), "w") as file:
        file.write(f"uid={os.getuid()}\\n")

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _mark()
    raise RuntimeError("the hook ran and stops here")

def get_requires_for_build_wheel(config_settings=None):
    _mark()
    return []
"""
PYPROJECT = """\
[build-system]
requires = []
build-backend = "hook"
backend-path = ["."]

[project]
name = "hook"
version = "1"
"""


def _finished(client: Client, job_id: str, timeout: float = 240) -> JobRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(job_id)
        if job.state in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} still {client.get(job_id).state} after {timeout}s")


def test_a_build_hook_runs_as_the_team_not_as_root(team_server: TeamServer) -> None:
    """ana's first job shows where its folder is; her second asks for the package in it,
    whose in-tree build backend writes the uid it runs as. bo's job naming the same
    package cannot even read it: a team's own environment is that team's alone."""
    mark = Path("/tmp") / f"trainfleet-hook-{secrets.token_hex(4)}"
    folder = team_server.project(
        "hook",
        {
            "job.yaml": "name: where\nroles:\n  worker: {command: pwd}\n",
            "pkg/pyproject.toml": PYPROJECT,
            "pkg/hook.py": BACKEND.replace(
                'os.environ.get("MARK_FILE", "/tmp/unset")', repr(str(mark))
            ),
        },
    )
    try:
        with team_server.client(team_server.ana) as ana:
            first = ana.submit((folder / "job.yaml").read_text(), workdir=folder)
            assert _finished(ana, first.id).state == "succeeded"
            where = ana.read_log(first.id, "worker", 0).decode().strip()
            hooked = f"name: hooked\nenvironment: {{pip: ['hook @ file://{where}/pkg']}}\n"
            second = ana.submit(hooked + "roles:\n  worker: {command: 'true'}\n")
            job = _finished(ana, second.id)
            assert job.state == "failed" and "environment build failed" in job.reason, job
        vision = pwd.getpwnam("tf-vision")
        assert mark.read_text() == f"uid={vision.pw_uid}\n"  # root's build wrote uid=0
        assert mark.stat().st_uid == vision.pw_uid
        mark.unlink()
        with team_server.client(team_server.bo) as bo:
            theirs = bo.submit(
                hooked.replace("hooked", "theirs") + "roles:\n  worker: {command: 'true'}\n"
            )
            job = _finished(bo, theirs.id)
            assert job.state == "failed" and "environment build failed" in job.reason, job
        assert not mark.exists()  # audio's account could not read vision's package
    finally:
        mark.unlink(missing_ok=True)


def test_a_built_environment_is_no_tasks_to_change(team_server: TeamServer) -> None:
    """A shared environment (six, from the index) is built by an account that runs no
    task and is root's once built: the job's task can neither add to it nor change it."""
    job_text = """\
name: venv
environment: {requirements: requirements.txt}
roles:
  worker:
    command: [sh, -c, "python -c 'import six'; touch $VIRTUAL_ENV/bin/planted;
      echo \\"[$(id -u)]\\" >> $VIRTUAL_ENV/bin/activate; echo done"]
"""
    folder = team_server.project("venv", {"job.yaml": job_text, "requirements.txt": "six\n"})
    with team_server.client(team_server.ana) as ana:
        job = ana.submit(job_text, workdir=folder)
        assert _finished(ana, job.id).state == "succeeded", ana.describe(job.id)
        log = ana.read_log(job.id, "worker", 0).decode()
    assert "Permission denied" in log and log.rstrip().endswith("done"), log
    (built,) = [
        p
        for p in (team_server.data / "environments").iterdir()
        if p.is_dir() and not p.name.startswith(".")
    ]
    assert not (built / "bin" / "planted").exists()
    assert "[" not in (built / "bin" / "activate").read_text().splitlines()[-1]
    info = built.stat()
    assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o755
    for folder_path, folders, files in os.walk(built):
        for name in (*folders, *files):
            entry = os.lstat(os.path.join(folder_path, name))
            writable = not stat.S_ISLNK(entry.st_mode) and entry.st_mode & 0o022
            assert entry.st_uid == 0 and not writable, (folder_path, name)


SWAP = """\
set -u
if [ -e attempted ]; then
  cat "$TOKEN_FILE"; echo; ls -la "$(dirname "$TOKEN_FILE")"
  exit 0
fi
touch attempted
folder=$(dirname "$TOKEN_FILE")
rm -f "$TOKEN_FILE" && ln -s "$TARGET" "$TOKEN_FILE" && echo "swapped the file"
mv "$folder" "$folder.gone" && ln -s "$PLANT" "$folder" && echo "swapped the folder"
exit 1
"""


def test_a_link_planted_before_a_restart_is_never_followed(team_server: TeamServer) -> None:
    """The task replaces its secret file by a link to a root-only file, and its secret's
    folder by a link to a folder of its choosing, then fails; its restart finds its
    secret file as it was, and root wrote nothing where the links lead."""
    target = team_server.folder / "root-only.txt"
    target.write_text("root's own\n")
    target.chmod(0o600)
    plant = team_server.folder / "planted"
    plant.mkdir(mode=0o777)
    plant.chmod(0o777)
    job_text = f"""\
name: swap
restart: {{policy: on-failure, max_restarts: 1, backoff: {{initial: 0.1}}}}
env:
  TOKEN_FILE: {{secret: wandb, key: api-key, file: true}}
  TARGET: {target}
  PLANT: {plant}
roles:
  worker: {{command: sh swap.sh}}
"""
    folder = team_server.project("swap", {"job.yaml": job_text, "swap.sh": SWAP})
    with team_server.client(team_server.ana) as ana:
        ana.create_secret("wandb", {"api-key": "s3cret-value-91"})
        job = ana.submit(job_text, workdir=folder)
        assert _finished(ana, job.id).state == "succeeded", ana.describe(job.id)
        log = ana.read_log(job.id, "worker", 0).decode()
    assert "swapped" not in log and "s3cret-value-91" not in log, log  # masked, and kept
    assert "***" in log, log
    assert target.read_text() == "root's own\n"
    assert list(plant.iterdir()) == []


LINGER = """\
import os, subprocess

def _linger():
    quiet = subprocess.DEVNULL  # as a daemon does: uv waits for nothing of it
    subprocess.Popen(
        ["sleep", "4242"], start_new_session=True, stdin=quiet, stdout=quiet, stderr=quiet
    )

def get_requires_for_build_wheel(config_settings=None):
    _linger()
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("no wheel")
"""


def test_a_shared_build_leaves_nothing_running(passable: Path) -> None:
    """A package of the index (here: of uv's find-links) whose build hook starts a process
    that outlives the build, to change the next shared environment as it is built: the
    hook runs as the shared builder, and nothing of that account runs once its build ends."""
    links = passable / "links"
    source = links / "linger-1"
    source.mkdir(parents=True)
    (source / "pyproject.toml").write_text(PYPROJECT.replace('name = "hook"', 'name = "linger"'))
    (source / "hook.py").write_text(LINGER)
    (source / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: linger\nVersion: 1\n")
    with tarfile.open(links / "linger-1.tar.gz", "w:gz") as archive:
        archive.add(source, "linger-1")
    shutil.rmtree(source)
    links.chmod(0o755)
    teams = start_team_server(passable, env={"UV_FIND_LINKS": str(links)})
    try:
        with teams.client(teams.ana) as ana:
            job = ana.submit(
                "name: linger\nenvironment: {pip: [linger==1]}\n"
                "roles:\n  worker: {command: 'true'}\n"
            )
            ended = _finished(ana, job.id)
        assert ended.state == "failed" and "environment build failed" in ended.reason, ended
        builder = pwd.getpwnam(BUILDER).pw_uid
        left = [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"].real == builder]
        assert left == []
        lingering = [
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if p.info["cmdline"] == ["sleep", "4242"]
        ]
        assert lingering == []  # the hook's process, as root, lived on before
    finally:
        teams.server.stop()
        subprocess.run(["pkill", "-f", "^sleep 4242"], check=False)
