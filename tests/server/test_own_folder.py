"""A job sent without a folder runs in an empty folder of its own in its job directory,
never in the server's own working directory (where, with teams, every team's account
ran such jobs: issue 31)."""

from __future__ import annotations

from trainfleet.client import Client

from .harness import LiveServer

JOB = "name: nofolder\nroles:\n  worker: {command: [sh, -c, 'pwd; ls -A; touch mine']}\n"


def test_a_job_without_a_folder_gets_an_empty_one_of_its_own(
    live: LiveServer, client: Client
) -> None:
    first, second = client.submit(JOB), client.submit(JOB)
    for job in (first, second):
        assert client.wait(job.id).state == "succeeded", client.describe(job.id)
    own = live.engine.data_dir.job_dir(first.id) / "workdir"
    assert client.read_log(first.id, "worker", 0).decode() == f"{own}\n"  # and nothing in it
    assert (own / "mine").is_file()
    assert client.read_log(second.id, "worker", 0).decode().splitlines() == [
        str(live.engine.data_dir.job_dir(second.id) / "workdir")
    ]  # the first one's file is not there
    client.delete(first.id)
    assert not own.exists()
