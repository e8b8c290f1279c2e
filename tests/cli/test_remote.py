"""The CLI against a real `trainfleet server` (a subprocess), with real jobs.

Every job command in remote mode, the configuration's precedence (flag > environment >
config file), bad config files, bad or missing tokens, an unreachable server, and
`trainfleet token` on the server's store.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import trainfleet, wait_for
from server.harness import ServerProcess

from trainfleet.client import Client
from trainfleet.domain.records import State

TOKEN = "remote-cli-tests-admin-token"
TWO_WORKERS = (
    "name: hello\nroles:\n  worker: {replicas: 2, command: 'echo line from $TRAINFLEET_INDEX'}\n"
)
SLEEPER = "name: sleeper\nroles:\n  worker: {command: 'echo up; sleep 60'}\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("remote") / "data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN}
    )
    yield process
    process.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.url, TOKEN) as client:
        yield client


def cli(
    *args: str | Path, server: str | None = None, token: str | None = TOKEN, **env: str
) -> subprocess.CompletedProcess[str]:
    """The real CLI with TRAINFLEET_SERVER/TRAINFLEET_TOKEN set (when given) and ``env``."""
    extra = {"TRAINFLEET_SERVER": server or "", "TRAINFLEET_TOKEN": token or ""}
    return subprocess.run(
        trainfleet(*args),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **extra, **env},
    )


def free_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_run_list_describe_logs_events_delete(server: ServerProcess, job_file, data_dir) -> None:
    job = job_file(TWO_WORKERS)
    result = cli("run", job, server=server.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"runs on {server.url}" in result.stdout
    assert re.search(r"^worker/1 \| line from 1$", result.stdout, re.MULTILINE)
    assert "trainfleet | worker/0 succeeded: exit code 0" in result.stdout
    assert re.search(
        r"trainfleet \| worker/1 +succeeded +\d+ +0 +127\.0\.0\.1:\d+ +0", result.stdout
    )
    found = re.search(r"job (hello-[0-9a-f]{8}) succeeded", result.stdout)
    assert found is not None
    job_id = found.group(1)
    assert not data_dir.exists(), "remote mode never touches the local data directory"

    listing = cli("list", "--name", "hello", "--state", "succeeded", server=server.url)
    assert re.search(rf"^{job_id} +succeeded +generic +admin", listing.stdout, re.MULTILINE)
    as_json = json.loads(cli("list", "-o", "json", "--user", "admin", server=server.url).stdout)
    assert job_id in [job["id"] for job in as_json]
    assert (
        cli(
            "list", "-o", "json", "--state", "failed", "--name", "hello", server=server.url
        ).stdout.strip()
        == "[]"
    )

    described = json.loads(cli("describe", job_id, "-o", "json", server=server.url).stdout)
    assert [t["state"] for t in described["tasks"]] == ["succeeded", "succeeded"]
    assert described["job"]["spec"]["name"] == "hello"
    assert "worker/1" in cli("describe", job_id, server=server.url).stdout
    assert "user: admin" in cli("describe", job_id, "-o", "yaml", server=server.url).stdout

    logs = cli("logs", job_id, server=server.url).stdout
    assert logs.splitlines() == ["worker/0 | line from 0", "worker/1 | line from 1"]
    one = cli("logs", job_id, "--role", "worker", "--index", "1", server=server.url)
    assert one.stdout == "worker/1 | line from 1\n"

    events = cli("events", job_id, server=server.url).stdout.splitlines()
    assert events[-1].endswith("job succeeded: worker/1 succeeded") or events[-1].endswith(
        "job succeeded: worker/0 succeeded"
    )
    as_json = [
        json.loads(line)
        for line in cli("events", job_id, "-o", "json", server=server.url).stdout.splitlines()
    ]
    assert as_json[0]["state"] == "queued" and as_json[-1]["state"] == "succeeded"

    assert cli("delete", job_id, server=server.url).stdout == f"job {job_id} deleted\n"
    gone = cli("describe", job_id, server=server.url)
    assert gone.returncode == 2 and gone.stderr == f"error: no job {job_id!r}\n"


def test_a_failed_job_exits_1(server: ServerProcess, job_file) -> None:
    job = job_file("name: broken\nroles:\n  worker: {command: 'exit 3'}\n")
    result = cli("run", job, server=server.url)
    assert result.returncode == 1
    assert re.search(r"failed: worker/0 exited with exit code 3$", result.stdout.strip())


def test_submit_returns_at_once_and_stop_cancels(
    server: ServerProcess, client: Client, job_file
) -> None:
    submitted = cli("submit", job_file(SLEEPER), server=server.url)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert re.fullmatch(r"sleeper-[0-9a-f]{8}", job_id)
    wait_for(lambda: client.get(job_id).state == State.RUNNING, what="the job running")

    follower = subprocess.Popen(
        trainfleet("logs", job_id, "-f"),
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TRAINFLEET_SERVER": server.url, "TRAINFLEET_TOKEN": TOKEN},
    )
    assert follower.stdout is not None
    assert follower.stdout.readline() == "worker/0 | up\n"
    running = cli("list", "--state", "running", "-o", "json", server=server.url)
    assert job_id in [job["id"] for job in json.loads(running.stdout)]
    refused = cli("delete", job_id, server=server.url)
    assert refused.returncode == 2 and "stop it first" in refused.stderr

    stopped = cli("stop", job_id, server=server.url)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == f"job {job_id} cancelled: cancelled by admin\n"
    assert follower.wait(timeout=30) == 0, "logs -f ends when the job ends"
    followed = cli("events", job_id, "-f", server=server.url)
    assert followed.stdout.splitlines()[-1].endswith("job cancelled: cancelled by admin")
    assert cli("delete", job_id, "--force", server=server.url).returncode == 0


def test_delete_force_stops_a_running_job(server: ServerProcess, client: Client, job_file) -> None:
    job_id = cli("submit", job_file(SLEEPER), "-o", "json", server=server.url)
    record = json.loads(job_id.stdout)
    assert record["state"] == "queued" and record["spec"]["name"] == "sleeper"
    wait_for(lambda: client.get(record["id"]).state == State.RUNNING, what="the job running")
    assert cli("delete", record["id"], "--force", server=server.url).returncode == 0
    assert record["id"] not in [job.id for job in client.list_jobs()]


def test_ctrl_c_cancels_the_job_on_the_server(
    server: ServerProcess, client: Client, job_file
) -> None:
    run = subprocess.Popen(
        trainfleet("run", job_file(SLEEPER)),
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TRAINFLEET_SERVER": server.url, "TRAINFLEET_TOKEN": TOKEN},
    )
    assert run.stdout is not None
    first = run.stdout.readline()
    job_id = re.sub(r"trainfleet \| job (\S+): .*\n", r"\1", first)
    wait_for(lambda: client.get(job_id).state == State.RUNNING, what="the job running")
    run.send_signal(signal.SIGINT)
    out = run.stdout.read()
    assert run.wait(timeout=60) == 130
    assert "stopping the job" in out
    assert client.get(job_id).state == State.CANCELLED


def test_spec_errors_read_the_same_as_with_the_embedded_engine(
    server: ServerProcess, job_file, data_dir
) -> None:
    bad = job_file("name: bad\nroles:\n  worker:\n    replicas: -1\n    command: x\n")
    for command in ("run", "submit"):
        local = cli(command, bad)
        remote = cli(command, bad, server=server.url)
        assert remote.returncode == local.returncode == 2
        assert remote.stderr == local.stderr
        assert "job.yaml:4: roles.worker.replicas: must be at least 1" in remote.stderr
    missing = cli("submit", "nope.yaml", server=server.url)
    assert missing.returncode == 2 and missing.stderr == "error: nope.yaml: no such file\n"


def test_submarine_flags_go_to_the_server(server: ServerProcess) -> None:
    result = cli(
        "run", "--name", "sub", "--framework", "generic", "--worker_launch_cmd", "echo sub-ran",
        server=server.url,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "worker/0 | sub-ran" in result.stdout


def test_bad_and_missing_tokens_and_unreachable_servers(server: ServerProcess) -> None:
    refused = cli("list", server=server.url, token="not-a-token")
    assert refused.returncode == 2
    assert refused.stderr == "error: the server refused the token (set TRAINFLEET_TOKEN)\n"
    missing = cli("list", server=server.url, token=None)
    assert missing.returncode == 2
    assert missing.stderr == "error: the server needs a token (set TRAINFLEET_TOKEN)\n"
    url = free_url()
    for args in (["list"], ["describe", "x"], ["logs", "x", "-f"], ["stop", "x"]):
        down = cli(*args, server=url)
        assert down.returncode == 2, args
        assert down.stderr.startswith(f"error: cannot reach the server at {url}: "), down.stderr
        assert "Traceback" not in down.stderr
    for args in (["describe", "no-such-job"], ["logs", "../etc"], ["stop", "no-such-job"]):
        result = cli(*args, server=server.url)
        assert result.returncode == 2 and result.stderr.startswith("error: "), args
        assert "Traceback" not in result.stderr


def _config(home: Path, text: str) -> Path:
    path = home / "trainfleet" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_config_precedence_flag_then_environment_then_file(
    server: ServerProcess,
    no_server_configured: Path,
) -> None:
    home = no_server_configured
    _config(home, f"server: {server.url}\ntoken: {TOKEN}\n")
    from_file = cli("list", token=None)
    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stdout.startswith("JOB")

    down = free_url()
    env_wins = cli("list", server=down)
    assert env_wins.returncode == 2 and down in env_wins.stderr
    flag_wins = cli("--server", server.url, "list", server=down)
    assert flag_wins.returncode == 0, flag_wins.stderr
    token_env_wins = cli("list", token="wrong-token")
    assert "refused the token" in token_env_wins.stderr

    _config(home, f"server: {down}\n")
    assert down in cli("list", token=None).stderr, "the file's server"
    assert cli("--server", server.url, "list").returncode == 0, "the flag's server, env token"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server: [unclosed\n", r"config\.yaml:\d+: not valid YAML"),
        ("- a list\n", r"config\.yaml: expected a mapping"),
        (
            "sever: http://x\n",
            r"config\.yaml: unknown key 'sever' "
            r"\(allowed: server, token, ca_cert, backend, slurm, kubernetes, container_runtime\)",
        ),
        ("server: 8080\n", r"config\.yaml: server: expected a non-empty string"),
        ("backend: yarn\n", r"config\.yaml: backend: Input should be 'local', 'slurm' or 'k"),
        ("kubernetes: {namespace: A_B}\n", r"config\.yaml: kubernetes\.namespace: String should"),
        ("kubernetes: {network: pod}\n", r"config\.yaml: kubernetes\.network: Input should be"),
        ("slurm: {partition: a b}\n", r"config\.yaml: slurm\.partition: String should match"),
        ("slurm: {spread: 3}\n", r"config\.yaml: slurm\.spread: Input should be a valid bool"),
        ("slurm: {nodes: 3}\n", r"config\.yaml: slurm\.nodes: Extra inputs are not permitted"),
    ],
)
def test_a_malformed_config_file_is_named(
    no_server_configured: Path,
    text: str,
    message: str,
) -> None:
    path = _config(no_server_configured, text)
    result = cli("list")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {path}")
    assert re.search(message, result.stderr) and "Traceback" not in result.stderr


def test_token_create_list_revoke(server: ServerProcess, client: Client, tmp_path: Path) -> None:
    data = server.process.args[4]  # the server's --data-dir
    made = cli("--data-dir", data, "token", "create", "alice")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    token_id = re.sub(r"token (\S+) alice of user alice .*\n", r"\1", made.stderr)
    assert len(secret) >= 40
    assert cli("list", server=server.url, token=secret).returncode == 0

    listed = cli("--data-dir", data, "token", "list").stdout
    assert re.search(rf"^{token_id} +alice +alice +\S+ \S+ +-$", listed, re.MULTILINE)
    rows = json.loads(cli("--data-dir", data, "token", "list", "-o", "json").stdout)
    assert {("first", "admin"), ("alice", "alice")} <= {(row["name"], row["user"]) for row in rows}
    assert all("digest" not in row for row in rows) and secret not in listed

    assert cli("--data-dir", data, "token", "revoke", token_id).returncode == 0
    # The server trusts a looked-up token for a moment (TOKEN_CACHE_SECONDS).
    refused = wait_for(
        lambda: (answer := cli("list", server=server.url, token=secret)).returncode == 2 and answer,
        timeout=20,
        what="the revoked token refused",
    )
    assert "refused the token" in refused.stderr
    again = cli("--data-dir", data, "token", "revoke", token_id)
    assert again.returncode == 2 and "revoked already" in again.stderr
    unknown = cli("--data-dir", data, "token", "revoke", "nope")
    assert unknown.returncode == 2 and "no token 'nope'" in unknown.stderr
    nowhere = cli("--data-dir", tmp_path / "empty", "token", "list")
    assert nowhere.returncode == 2 and "no trainfleet data in" in nowhere.stderr

    # Made on the server's machine, not through the API: in the audit trail all the same.
    local = {(r.action, r.target): r for r in client.audit(limit=None) if r.source == "local"}
    assert {("user.create", "alice"), ("token.create", token_id), ("token.revoke", token_id)} < set(
        local
    )
    assert local["token.create", token_id].detail.startswith("named alice of user alice; by ")
    assert local["token.revoke", token_id].user == "" and secret not in str(local)
    first = [r for r in local.values() if r.detail.startswith("named first of user admin")]
    assert len(first) == 1 and first[0].detail.endswith("(TRAINFLEET_ADMIN_TOKEN)")


def test_a_trainjob_runs_on_the_server_with_its_runtime_file(
    server: ServerProcess, client: Client, tmp_path: Path
) -> None:
    """The server knows only the built-in runtimes: ``--runtime`` makes the CLI read the
    TrainJob here and send the job it means; without it, the server refuses naming the field."""
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\n"
        "metadata: {name: greeter}\nspec:\n  mlPolicy: {numNodes: 2, torch: {}}\n"
        "  template:\n    spec:\n      replicatedJobs:\n        - name: node\n"
        "          template:\n            spec:\n              template:\n                spec:\n"
        "                  containers:\n                    - name: node\n"
        "                      command: [sh, -c, 'echo hello from $PET_NODE_RANK of $PET_NNODES']\n"
    )
    job = tmp_path / "trainjob.yaml"
    job.write_text(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: greet}\n"
        "spec:\n  runtimeRef: {name: greeter, kind: TrainingRuntime}\n  trainer: {numNodes: 3}\n"
    )
    refused = cli("submit", job, server=server.url)
    assert refused.returncode == 2, refused.stderr
    assert "spec.runtimeRef.name: no TrainingRuntime named 'greeter'" in refused.stderr
    result = cli("run", "--runtime", runtime, job, server=server.url)
    assert result.returncode == 0, result.stderr
    (record,) = [job for job in client.list_jobs() if job.name == "greet"]
    logs = [client.read_log(record.id, "worker", index).decode() for index in range(3)]
    assert logs == [f"hello from {index} of 3\n" for index in range(3)]


def test_a_remote_view_far_behind_skips_to_the_end(server: ServerProcess, client: Client) -> None:
    """The live view of a job on a server, like the local one, skips a task that printed
    more than it can show to its last lines, saying so; once it has caught up, its reads
    take what is new (the skip is only for a view that is behind)."""
    from trainfleet.cli.remote import RemoteService
    from trainfleet.control.settings import Target
    from trainfleet.datadir.follow import LogFollower

    printer = "python -c 'for n in range(200_000): print(\"step %06d\" % n)'"  # 2.4 MB
    job = client.submit(f"name: burst\nroles:\n  worker: {{command: {json.dumps(printer)}}}\n")
    assert client.wait(job.id).state == State.SUCCEEDED
    service = RemoteService(Target(server.url, TOKEN))
    try:
        live = LogFollower(service, job.id, [("worker", 0)], behind=1 << 20, keep=1000)
        shown = b"".join(live.read()).decode().splitlines()
        assert shown[0].startswith("worker/0 | [trainfleet: 2.3 MiB of output skipped to keep up")
        assert shown[-1] == "worker/0 | step 199999" and len(shown) < 100
        assert list(live.read()) == []
        whole = LogFollower(service, job.id, [("worker", 0)], per_read=1 << 20)
        pieces = [b"".join(whole.read()) for _ in range(4)]
        assert [piece.count(b"\n") for piece in pieces[:2]] == [(1 << 20) // 12] * 2
        assert b"".join(pieces).count(b"\n") == 200_000  # 2.4 MB behind: under ``behind``
    finally:
        service.close()
