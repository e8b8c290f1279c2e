"""``GET /api/v1/jobs/{job}/workdir``: a running job's Pods fetch its folder (the tree it
was sent) with the job's own token, and nothing else opens it: no token, a member's, or
another job's; nor once the job has ended."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx
from helpers import wait_for

from trainfleet.client import Client
from trainfleet.vault.service_tokens import workdir_token

from .harness import LiveServer

JOB = "name: held\nroles:\n  worker: {command: [sleep, '120']}\n"


def _fetch(live: LiveServer, job_id: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.get(f"{live.url}/api/v1/jobs/{job_id}/workdir", headers=headers, timeout=30)


def _members(answer: httpx.Response) -> dict[str, tuple[int, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:gz") as tar:
        return {
            member.name: (member.mode, tar.extractfile(member).read())  # type: ignore[union-attr]
            for member in tar
            if member.isreg()
        }


def test_a_jobs_pods_fetch_its_tree_with_its_own_token_alone(
    live: LiveServer, client: Client, tmp_path: Path
) -> None:
    folder = tmp_path / "sent"
    (folder / "bin").mkdir(parents=True)
    (folder / "data.txt").write_text("the job's data\n")
    (folder / "bin" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (folder / "bin" / "run.sh").chmod(0o700)
    (folder / ".gitignore").write_text("big.bin\n")
    (folder / "big.bin").write_bytes(b"x" * 1000)
    job = client.submit(JOB, workdir=folder)
    bare = client.submit(JOB)  # no folder sent: it starts empty
    root = live.engine.data_dir.root

    fetched = _fetch(live, job.id, workdir_token(root, job.id))
    assert fetched.status_code == 200, fetched.text
    assert _members(fetched) == {
        ".gitignore": (0o644, b"big.bin\n"),
        "data.txt": (0o644, b"the job's data\n"),
        "bin/run.sh": (0o755, b"#!/bin/sh\necho run\n"),  # readable by any user of a Pod
    }
    for token in (None, live.token, workdir_token(root, bare.id), "0" * 64):
        refused = _fetch(live, job.id, token)
        assert refused.status_code == 401, (token, refused.text)
        assert "data" not in refused.text
    refusals = [r for r in client.audit() if r.outcome == "401 not the job's folder token"]
    assert len(refusals) == 4, "each refusal is in the audit trail"
    empty = _fetch(live, bare.id, workdir_token(root, bare.id))
    assert empty.status_code == 200 and _members(empty) == {}
    unknown = "held-0123456789abcdef"
    assert _fetch(live, unknown, workdir_token(root, unknown)).status_code == 404

    client.cancel(job.id)
    wait_for(lambda: client.get(job.id).state == "cancelled", timeout=60, what="the cancel")
    ended = _fetch(live, job.id, workdir_token(root, job.id))
    assert ended.status_code == 409 and "has ended" in ended.json()["detail"]
    client.cancel(bare.id)
