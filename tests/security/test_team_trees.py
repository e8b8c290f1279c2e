"""A stored folder is its team's: team B (bo, of audio) learns nothing of team A's (ana, of
vision) job folders, and a digest of A's folder gets B nothing (issue 23, item 2).

Each attack runs as it would for a member: B's own job, as B's team's account, reads
what every account may read; B's token asks the API.
"""

from __future__ import annotations

import stat

import httpx
from helpers import wait_for

from security.conftest import TeamServer
from trainfleet.wire import API_PREFIX

LONG = "name: long\nroles:\n  worker: {command: sleep 345}\n"
"""A's job: a task whose command line B can recognise."""
SCAN = """\
import os, sys
for name in os.listdir("/proc"):
    if name.isdigit():
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                print("cmdline:", handle.read().replace(b"\\0", b" ").decode(errors="replace"))
        except OSError:
            pass
for path in sys.argv[1:]:
    try:
        with open(path) as handle:
            print("read:", handle.read())
    except OSError as error:
        print("refused:", error.strerror)
"""


def _job(name: str, command: str) -> str:
    return f"name: {name}\nroles:\n  worker: {{command: {command!r}}}\n"


def _running(teams: TeamServer, token: str, job_id: str) -> None:
    with teams.client(token) as client:
        wait_for(
            lambda: client.describe(job_id).tasks[0].pid is not None,
            timeout=60,
            what=f"{job_id}'s task started",
        )


def _log_of_ended(teams: TeamServer, token: str, job_id: str) -> str:
    with teams.client(token) as client:
        ended = client.wait(job_id)
        log = client.read_log(job_id, "worker", 0).decode(errors="replace")
    assert ended.state == "succeeded", (ended, log)
    return log


def test_no_command_line_names_another_teams_job_folder(team_server: TeamServer) -> None:
    """B's job reads every process's command line while A's job runs: A's task shows (so
    B does see A's processes), A's supervisor too, but no path of A's job."""
    teams = team_server
    mine = teams.project("a", {"data.txt": "vision's own\n"})
    with teams.client(teams.ana) as ana:
        theirs = ana.submit(LONG, workdir=mine)
    _running(teams, teams.ana, theirs.id)
    scanner = teams.project("b", {"scan.py": SCAN})
    with teams.client(teams.bo) as bo:
        scan = bo.submit(_job("scan", "python scan.py"), workdir=scanner)
    log = _log_of_ended(teams, teams.bo, scan.id)
    assert "cmdline: sleep 345" in log, log  # A's task, as every account sees it
    assert "shim.py" in log, log
    job_dir = teams.data / "jobs" / theirs.id
    assert f"jobs/{theirs.id}" not in log and str(job_dir) not in log, log


def test_another_teams_tree_marker_cannot_be_read(team_server: TeamServer) -> None:
    """B's job, told where A's job keeps the digest of its folder, cannot read it."""
    teams = team_server
    mine = teams.project("a", {"data.txt": "vision's own\n"})
    with teams.client(teams.ana) as ana:
        tree = ana.upload_workdir(mine)
        theirs = ana.submit(LONG, workdir=mine)
    marker = teams.data / "jobs" / theirs.id / "workdir.tree"
    assert marker.read_text().endswith(tree)
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    scanner = teams.project("b", {"scan.py": SCAN})
    with teams.client(teams.bo) as bo:
        scan = bo.submit(_job("peek", f"python scan.py {marker}"), workdir=scanner)
    log = _log_of_ended(teams, teams.bo, scan.id)
    assert "refused: Permission denied" in log, log
    assert tree not in log, log


def test_another_teams_digest_names_nothing(team_server: TeamServer) -> None:
    """A's digest with B's token: HEAD answers 404, a job naming it 422 (the field named),
    and nothing is stored."""
    teams = team_server
    mine = teams.project("a", {"train.py": "print('vision only')\n"})
    with teams.client(teams.ana) as ana:
        tree = ana.upload_workdir(mine)
    bo = {"Authorization": f"Bearer {teams.bo}"}
    ana_auth = {"Authorization": f"Bearer {teams.ana}"}
    url = f"{teams.url}{API_PREFIX}"
    assert httpx.head(f"{url}/workdirs/{tree}", headers=ana_auth).status_code == 200
    assert httpx.head(f"{url}/workdirs/{tree}", headers=bo).status_code == 404
    named = httpx.post(
        f"{url}/jobs",
        params={"tree": tree},
        content=_job("borrowed", "python train.py"),
        headers={**bo, "Content-Type": "application/yaml"},
        timeout=60,
    )
    assert named.status_code == 422, named.text
    assert named.json()["detail"].startswith("tree: no stored tree"), named.text
    with teams.client(teams.admin) as admin:
        assert list(admin.list_jobs()) == []
    jobs = teams.data / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == []
    assert not (teams.data / "workdirs" / "teams" / "audio").exists()


def test_the_same_folder_sent_by_two_teams_is_stored_and_runs_for_each(
    team_server: TeamServer,
) -> None:
    """A and B send the same folder: each team gets its own tree (owner-only files), and
    each job runs in a copy of it."""
    teams = team_server
    folder = teams.project("shared", {"data.txt": "the same files\n", "sub/more.txt": "more\n"})
    jobs = {}
    for token in (teams.ana, teams.bo):
        with teams.client(token) as client:
            jobs[token] = client.submit(_job("same", "cat data.txt sub/more.txt"), workdir=folder)
    for token, job in jobs.items():
        assert _log_of_ended(teams, token, job.id) == "the same files\nmore\n"
    with teams.client(teams.ana) as ana:
        tree = ana.upload_workdir(folder)
    for team in ("vision", "audio"):
        stored = teams.data / "workdirs" / "teams" / team / tree
        modes = {
            path.relative_to(stored).as_posix(): stat.S_IMODE(path.stat().st_mode)
            for path in [stored, *stored.rglob("*")]
        }
        assert modes == {".": 0o700, "sub": 0o700, "data.txt": 0o600, "sub/more.txt": 0o600}
