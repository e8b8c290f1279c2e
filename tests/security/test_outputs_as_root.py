"""A member's task leaves links and a FIFO in its job's output folder for a server running
as root to follow: the server reads back the task's own file and nothing through a link,
and the folder is the team's to write exactly as its checkpoint folder is."""

from __future__ import annotations

import os
import pwd
import stat

import pytest

from security.conftest import TeamServer
from trainfleet.backends.accounts import account_name
from trainfleet.client import NotFound

WRITE = """\
cd "$TRAINFLEET_OUTPUT_DIR"
id -u > uid.txt
ln -s "$TARGET" evil
ln -s /etc/shadow shadow
mkfifo pipe
"""


@pytest.mark.timeout(300)
def test_a_root_server_reads_a_members_outputs_and_follows_no_link(
    team_server: TeamServer,
) -> None:
    target = team_server.folder / "root-only.txt"
    target.write_text("root's own\n")
    target.chmod(0o600)
    job_text = f"name: out\nenv:\n  TARGET: {target}\nroles:\n  worker: {{command: sh write.sh}}\n"
    folder = team_server.project("out", {"job.yaml": job_text, "write.sh": WRITE})
    with team_server.client(team_server.ana) as ana:
        job = ana.submit(job_text, workdir=folder)
        assert ana.wait(job.id).state == "succeeded", ana.read_log(job.id, "worker", 0)
        assert [output.name for output in ana.job_outputs(job.id)] == ["uid.txt"]
        assert int(ana.job_output(job.id, "uid.txt")) == pwd.getpwnam(account_name("vision")).pw_uid
        for name in ("evil", "shadow", "pipe"):
            with pytest.raises(NotFound, match=r"\(outputs: uid.txt\)"):
                ana.job_output(job.id, name)
    with team_server.client(team_server.bo) as bo, pytest.raises(NotFound):
        bo.job_outputs(job.id)

    share = team_server.data / "jobs" / job.id / "tasks"
    output, checkpoints = os.stat(share / "output"), os.stat(share / "checkpoints")
    assert (stat.S_IMODE(output.st_mode), output.st_uid, output.st_gid) == (
        stat.S_IMODE(checkpoints.st_mode),
        checkpoints.st_uid,
        checkpoints.st_gid,
    )
    assert stat.S_IMODE(output.st_mode) == 0o2770 and output.st_uid == 0
    assert output.st_gid == pwd.getpwnam(account_name("vision")).pw_gid
