"""``trainfleet logs JOB --output [NAME]`` on this machine's jobs (embedded): a real job's
task writes ``$TRAINFLEET_OUTPUT_DIR``; the CLI lists its outputs and prints one's bytes as
they are, and refuses what is no output (a link, a FIFO, a bad name) with exit code 2."""

from __future__ import annotations

import subprocess

import pytest
from helpers import run_cli, trainfleet

from trainfleet.control.engine import Engine

RESULT = b"line\x00\xff\n"
WRITER = r"""
name: writer
roles:
  worker:
    command: >-
      cd "$TRAINFLEET_OUTPUT_DIR" && printf 'line\000\377\n' > result.txt
      && echo two > model-1.bin && ln -s /etc/shadow evil && mkfifo pipe && mkdir sub
"""


@pytest.mark.timeout(180)
def test_logs_output_lists_and_prints_a_jobs_outputs(job_file, engine: Engine) -> None:
    assert run_cli("run", job_file(WRITER)).returncode == 0
    job_id = engine.list()[0].id

    listed = run_cli("logs", job_id, "--output")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0] == ["NAME", "SIZE", "MODIFIED"]
    assert [row[:3] for row in rows[1:]] == [["model-1.bin", "4", "B"], ["result.txt", "7", "B"]]

    printed = subprocess.run(
        trainfleet("logs", job_id, "--output", "result.txt"), capture_output=True, timeout=60
    )
    assert printed.returncode == 0 and printed.stdout == RESULT, printed.stderr

    for name, said in (
        ("evil", f"error: job {job_id} has no output 'evil' (outputs: model-1.bin, result.txt)"),
        ("pipe", f"error: job {job_id} has no output 'pipe'"),
        ("sub", f"error: job {job_id} has no output 'sub'"),
        ("../x", "error: '../x' is no output's name: a file name of letters, digits"),
        ("a/b", "error: 'a/b' is no output's name"),
    ):
        refused = run_cli("logs", job_id, "--output", name, timeout=60)
        assert refused.returncode == 2 and refused.stderr.startswith(said), refused.stderr
        assert refused.stdout == ""

    mixed = run_cli("logs", job_id, "--output", "--role", "worker")
    assert mixed.returncode == 2 and "--output takes no --role" in mixed.stderr
    unknown = run_cli("logs", "no-such-job", "--output")
    assert unknown.returncode == 2 and "no-such-job" in unknown.stderr


def test_a_job_that_wrote_nothing_has_no_output(job_file, engine: Engine) -> None:
    quiet = job_file("name: quiet\nroles:\n  worker: {command: 'true'}\n")
    assert run_cli("run", quiet).returncode == 0
    job_id = engine.list()[0].id
    listed = run_cli("logs", job_id, "--output")
    assert listed.returncode == 0 and listed.stdout == f"job {job_id}: no output\n"
