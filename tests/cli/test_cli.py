"""The CLI as a user meets it: run's output, list/describe/logs, dry runs, bad input, GPUs."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import process_group_alive, run_cli, trainfleet, wait_for

from trainfleet.backends.local.gpus import NVIDIA_DRIVER
from trainfleet.control.engine import Engine
from trainfleet.domain.records import State


def test_run_prints_prefixed_logs_events_and_the_task_table(job_file) -> None:
    job = job_file(
        """
        name: hello
        roles:
          chief: {command: 'echo "chief says hi"; echo "to stderr" >&2'}
          worker: {replicas: 2, command: 'printf "no newline at the end"'}
        """
    )
    result = run_cli("run", job)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^chief/0  \| chief says hi$", out, re.MULTILINE)
    assert re.search(r"^chief/0  \| to stderr$", out, re.MULTILINE)
    assert re.search(r"^worker/1 \| no newline at the end$", out, re.MULTILINE)
    assert "trainfleet | chief/0 succeeded: exit code 0" in out
    assert re.search(r"trainfleet \| TASK +STATE +PID +RESTARTS +ADDRESS +EXIT", out)
    assert re.search(r"trainfleet \| worker/1 +succeeded +\d+ +0 +127\.0\.0\.1:\d+ +0", out)
    assert re.search(r"job hello-[0-9a-f]{8} succeeded: chief/0 succeeded$", out.strip())


def test_run_on_a_terminal_draws_the_live_table(job_file, data_dir: Path) -> None:
    job = job_file(
        "name: tty\nroles:\n  worker: {replicas: 2, command: 'echo step one; sleep 0.3'}\n"
    )
    parent, child = pty.openpty()
    process = subprocess.Popen(
        trainfleet("run", job),
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, "COLUMNS": "150"},
    )
    os.close(child)
    output = b""
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=60) == 0
    screen = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", output).decode()
    assert re.search(r"TASK\s+STATE\s+PID\s+RESTARTS\s+ADDRESS", screen)
    assert re.search(r"worker/1\s+succeeded", screen)
    assert "step one" in screen


def test_failed_job_exits_non_zero_naming_task_and_code(job_file) -> None:
    job = job_file("name: broken\nroles:\n  worker: {replicas: 2, command: 'exit 3'}\n")
    result = run_cli("run", job)
    assert result.returncode == 1
    assert re.search(
        r"job broken-[0-9a-f]{8} failed: worker/[01] exited with exit code 3$",
        result.stdout.strip(),
    )


def test_list_describe_and_logs_after_the_job(job_file, engine: Engine) -> None:
    job = job_file(
        "name: kept\nroles:\n  worker: {replicas: 2, command: 'echo line from $TRAINFLEET_INDEX'}\n"
    )
    assert run_cli("run", job).returncode == 0
    job_id = engine.list()[0].id

    listing = run_cli("list")
    assert re.search(rf"^{job_id} +succeeded +generic", listing.stdout, re.MULTILINE)
    as_json = json.loads(run_cli("list", "-o", "json").stdout)
    assert as_json[0]["id"] == job_id and as_json[0]["state"] == "succeeded"

    described = json.loads(run_cli("describe", job_id, "-o", "json").stdout)
    assert [t["state"] for t in described["tasks"]] == ["succeeded", "succeeded"]
    assert described["job"]["spec"]["name"] == "kept"
    assert [e["state"] for e in described["events"]][:3] == ["queued", "starting", "running"]
    assert "worker/1" in run_cli("describe", job_id).stdout

    logs = run_cli("logs", job_id).stdout
    assert logs.splitlines() == ["worker/0 | line from 0", "worker/1 | line from 1"]
    assert (
        run_cli("logs", job_id, "--role", "worker", "--index", "1").stdout
        == "worker/1 | line from 1\n"
    )


def test_tables_show_text_as_written(job_file, tmp_path: Path) -> None:
    """Square brackets in a job's text are not taken for Rich's markup."""
    job = job_file("name: brackets\nroles:\n  worker: {command: 'true'}\n")
    workdir = tmp_path / "run [red]"
    workdir.mkdir()
    ran = run_cli("run", job, "--workdir", workdir)
    assert ran.returncode == 0, ran.stderr
    job_id = re.search(r"job (\S+):", ran.stdout)[1]  # type: ignore[index]
    assert f"dir {workdir}\n" in run_cli("describe", job_id).stdout


def test_logs_follow_from_another_terminal_while_the_job_runs(
    job_file, engine: Engine, tmp_path: Path
) -> None:
    job = job_file(
        "name: follow\nroles:\n"
        "  worker: {command: 'echo first; while [ ! -e GO ]; do sleep 0.05; done; echo second'}\n"
    )
    run = subprocess.Popen(trainfleet("run", job), stdout=subprocess.DEVNULL)
    job_id = str(wait_for(lambda: engine.list() and engine.list()[0].id, what="the job"))
    follower = subprocess.Popen(trainfleet("logs", job_id, "-f"), stdout=subprocess.PIPE, text=True)
    assert follower.stdout is not None
    assert follower.stdout.readline() == "worker/0 | first\n"
    (tmp_path / "GO").touch()
    assert follower.stdout.readline() == "worker/0 | second\n"
    assert follower.wait(timeout=30) == 0, "logs -f ends when the job ends"
    assert run.wait(timeout=30) == 0


def test_dry_run_prints_environment_and_starts_nothing(job_file, engine: Engine) -> None:
    job = job_file(
        """
        name: dry
        framework: tensorflow
        roles:
          ps: {command: trainfleet tf-server}
          worker: {replicas: 2, command: "python train.py --data %input_path% --tag [red]"}
        input_path: /data/in
        env: {STYLE: "[bold]"}
        """
    )
    result = run_cli("run", "--dry-run", job)
    assert result.returncode == 0, result.stderr
    assert "worker/1  /bin/sh -c 'python train.py --data /data/in --tag [red]'" in result.stdout
    assert "command: python train.py --data %input_path% --tag [red]\n" in result.stdout
    assert "  STYLE=[bold]\n" in result.stdout and "STYLE: '[bold]'\n" in result.stdout
    config = re.search(r"worker/1 .*?TF_CONFIG=(\{.*?\})\n", result.stdout, re.DOTALL)
    assert config is not None
    tf_config = json.loads(config.group(1))
    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert sorted(tf_config["cluster"]) == ["ps", "worker"]
    assert engine.list() == []


def test_bad_input_exits_2_with_a_clear_message(job_file, engine: Engine) -> None:
    missing = run_cli("run", "nope.yaml")
    assert (
        missing.returncode == 2
        and "nope.yaml" in missing.stderr
        and "Traceback" not in missing.stderr
    )

    bad = job_file("name: bad\nroles:\n  worker:\n    replicas: -1\n    command: x\n")
    result = run_cli("run", bad)
    assert result.returncode == 2
    assert "job.yaml:4: roles.worker.replicas" in result.stderr and "Traceback" not in result.stderr

    for args in (["describe", "no-such-job"], ["logs", "no-such-job"], ["logs", "../etc"]):
        result = run_cli(*args)
        assert result.returncode == 2, args
        assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert run_cli("run").returncode == 2
    assert run_cli("list", "--limit", "0").returncode == 2
    assert engine.list() == []


def test_gpus_are_exclusive_and_remapped(job_file, engine: Engine, monkeypatch) -> None:
    """A fake GPU inventory (TRAINFLEET_GPUS): no GPU can run here."""
    monkeypatch.setenv("TRAINFLEET_GPUS", "0,1,2,5")
    job = job_file(
        """
        name: gpus
        roles:
          ps: {command: 'echo "ps sees [$CUDA_VISIBLE_DEVICES]"'}
          worker: {replicas: 2, command: 'echo "sees $CUDA_VISIBLE_DEVICES"', resources: {gpu: 2}}
        success: [worker, ps]
        """
    )
    result = run_cli("run", job)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "worker/0 | sees 0,1" in result.stdout
    assert "worker/1 | sees 2,5" in result.stdout
    assert "ps/0     | ps sees []" in result.stdout

    too_many = job_file(
        "name: greedy\nroles:\n  worker: {replicas: 3, command: x, resources: {gpu: 2}}\n",
        name="greedy.yaml",
    )
    result = run_cli("run", too_many)
    assert result.returncode == 2
    assert "needs gpu 6 in all but the nodes have gpu 4" in result.stderr
    assert [job.name for job in engine.list()] == ["gpus"]


def test_submarine_flags_run_a_job(data_dir: Path, tmp_path: Path) -> None:
    show_task = "import json, os; print(json.loads(os.environ['TF_CONFIG'])['task'])"
    result = run_cli(
        "run", "--name", "sub", "--framework", "tensorflow", "--num_workers", "2",
        "--worker_launch_cmd", f'python -c "{show_task}"',
        "--num_ps", "1", "--ps_launch_cmd", "sleep 600", "--env", "A=1",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "worker/1 | {'type': 'worker', 'index': 1}" in result.stdout
    assert "ps/0     " in result.stdout


def test_schema_is_json_schema_of_job_files() -> None:
    schema = json.loads(run_cli("schema").stdout)
    assert schema["title"] == "JobSpec"
    assert {"name", "roles", "restart", "success"} <= set(schema["properties"])


def test_cli_starts_without_heavy_imports() -> None:
    """`run` stays fast: no Rich (terminal only) and no Kubeflow models for plain job files."""
    code = (
        "import sys; from trainfleet.cli import main, commands, run_view; "
        "heavy = ('rich', 'trainfleet.spec.kubeflow', 'psutil'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_task_states_are_stored_for_other_terminals(job_file, engine: Engine) -> None:
    job = job_file("name: states\nroles:\n  worker: {command: 'exit 0'}\n")
    assert run_cli("run", job).returncode == 0
    details = engine.describe(engine.list()[0].id)
    assert details.job.state == State.SUCCEEDED
    assert details.job.started_at and details.job.finished_at
    assert [(e.task, e.state) for e in details.events] == [
        ("", "queued"), ("", "starting"), ("worker/0", "running"), ("", "running"),
        ("worker/0", "succeeded"), ("", "succeeded"),
    ]  # fmt: skip


def test_live_logs_skip_a_burst_they_cannot_keep_up_with(engine: Engine, tmp_path: Path) -> None:
    from trainfleet.cli.embedded import EngineService
    from trainfleet.datadir.follow import LogFollower

    service = EngineService(engine)
    log = engine.log_path("burst-1", "worker", 0)
    log.parent.mkdir(parents=True)
    log.write_bytes(b"".join(b"step %06d\n" % n for n in range(200_000)))  # 2.4 MB
    live = LogFollower(service, "burst-1", [("worker", 0)], behind=1 << 20, keep=1000)
    shown = b"".join(live.read()).decode().splitlines()
    assert shown[0].startswith("worker/0 | [trainfleet: 2.3 MiB of output skipped to keep up")
    assert shown[0].endswith("trainfleet logs burst-1 --role worker --index 0]")
    assert shown[-1] == "worker/0 | step 199999"
    assert len(shown) < 100
    everything = b"".join(
        LogFollower(service, "burst-1", [("worker", 0)], behind=1 << 20).read(final=True)
    )
    assert everything.count(b"\n") == 200_000


def test_live_logs_take_a_bounded_piece_of_each_task_per_read(engine: Engine) -> None:
    """A view shows at most ``per_read`` bytes of a task at a time (by default a quarter
    MiB: ``benchmarks/launch.py --only e`` shows what more costs a task), in order, the
    rest at the next reads: a task that prints fast never has its view copying all it
    prints."""
    from trainfleet.cli.embedded import EngineService
    from trainfleet.datadir.follow import LogFollower

    log = engine.log_path("fast-1", "worker", 0)
    log.parent.mkdir(parents=True)
    lines = [b"step %06d\n" % n for n in range(300_000)]  # 3.3 MB
    log.write_bytes(b"".join(lines))
    live = LogFollower(EngineService(engine), "fast-1", [("worker", 0)])
    assert live.per_read <= 256 << 10
    pieces = [b"".join(live.read()) for _ in range(3)]
    assert all(0 < piece.count(b"\n") <= live.per_read // 12 + 1 for piece in pieces)
    shown = b"".join([*pieces, *live.read(final=True)]).splitlines()
    assert shown == [b"worker/0 | " + line.rstrip(b"\n") for line in lines]


def test_events_stop_and_delete(job_file, engine: Engine) -> None:
    job = job_file("name: evented\nroles:\n  worker: {command: 'exit 0'}\n")
    assert run_cli("run", job).returncode == 0
    job_id = engine.list()[0].id
    lines = run_cli("events", job_id).stdout.splitlines()
    assert [line.split("  ", 1)[1] for line in lines][-2:] == [
        "worker/0 succeeded: exit code 0",
        "job succeeded: worker/0 succeeded",
    ]
    as_json = [
        json.loads(line) for line in run_cli("events", job_id, "-o", "json").stdout.splitlines()
    ]
    assert as_json[0]["state"] == "queued" and as_json[-1]["state"] == "succeeded"

    stopped = run_cli("stop", job_id)
    assert stopped.returncode == 0 and f"job {job_id} succeeded" in stopped.stdout

    assert run_cli("delete", job_id).returncode == 0
    assert run_cli("describe", job_id).returncode == 2
    assert run_cli("delete", job_id).returncode == 2


def test_events_follow_until_the_job_ends(job_file, engine: Engine, tmp_path: Path) -> None:
    job = job_file(
        "name: waiting\nroles:\n  worker: {command: 'while [ ! -e GO ]; do sleep 0.05; done'}\n"
    )
    run = subprocess.Popen(trainfleet("run", job), stdout=subprocess.DEVNULL)
    job_id = str(wait_for(lambda: engine.list() and engine.list()[0].id, what="the job"))
    follower = subprocess.Popen(
        trainfleet("events", job_id, "-f"), stdout=subprocess.PIPE, text=True
    )
    assert follower.stdout is not None
    wait_for(lambda: engine.get(job_id).state == State.RUNNING, what="the job running")
    (tmp_path / "GO").touch()
    assert follower.wait(timeout=30) == 0
    assert follower.stdout.read().splitlines()[-1].endswith("job succeeded: worker/0 succeeded")
    assert run.wait(timeout=30) == 0


def test_embedded_submit_runs_in_the_background_and_stop_cancels(
    job_file, engine: Engine, data_dir: Path, tmp_path: Path
) -> None:
    quick = job_file("name: quick\nroles:\n  worker: {command: 'echo done here'}\n")
    submitted = run_cli("submit", quick)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert re.fullmatch(r"quick-[0-9a-f]{8}", job_id)
    wait_for(lambda: engine.get(job_id).state == State.SUCCEEDED, what="the job to succeed")
    assert run_cli("logs", job_id).stdout == "worker/0 | done here\n"
    assert "job succeeded" in (data_dir / "jobs" / job_id / "runner.log").read_text()

    sleeper = job_file("name: sleeper\nroles:\n  worker: {command: 'sleep 60'}\n", name="s.yaml")
    job_id = run_cli("submit", sleeper, "--workdir", tmp_path).stdout.strip()
    wait_for(lambda: engine.get(job_id).state == State.RUNNING, what="the job running")
    pid = engine.tasks(job_id)[0].pid
    assert pid is not None
    stopped = run_cli("stop", job_id)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith(f"job {job_id} cancelled")
    wait_for(lambda: not process_group_alive(pid), 10, "the task to end")


def test_embedded_run_loads_no_client_or_server(data_dir: Path) -> None:
    """`run` without a server stays fast: neither httpx nor the SDK nor the server load, nor
    what only some jobs need (packaging for `environment: {pip}`, the tf-server program,
    NVML on a machine without an NVIDIA driver)."""
    heavy = ["httpx", "trainfleet.client", "trainfleet.server", "trainfleet.cli.remote"]
    heavy += ["packaging", "trainfleet.programs.tf_server"]
    if not any(os.path.exists(path) for path in NVIDIA_DRIVER):
        heavy.append("pynvml")
    code = (
        "import sys\n"
        "from trainfleet.cli.main import cli\n"
        "try:\n"
        "    cli(['run', '--name', 'light', '--worker_launch_cmd', 'true'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        f"heavy = {heavy!r}\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_read_commands_load_no_engine(job_file, engine: Engine) -> None:
    """`list`, `describe`, `logs` and `events` read the store alone: no backend, scheduler,
    controller, job-spec models or pydantic load (they cost most of a read command's time)."""
    job = job_file("name: r\nroles:\n  worker: {command: 'echo hi'}\n")
    assert run_cli("run", job).returncode == 0
    job_id = engine.list()[0].id
    code = (
        "import sys\n"
        "from trainfleet.cli.main import cli\n"
        f"for args in (['list'], ['describe', {job_id!r}], ['logs', {job_id!r}],"
        f" ['events', {job_id!r}]):\n"
        "    try:\n"
        "        cli(args)\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, (args, e.code)\n"
        "heavy = ('trainfleet.backends', 'trainfleet.scheduling', 'trainfleet.control.engine',"
        " 'trainfleet.control.controller', 'trainfleet.spec.models', 'pydantic')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "worker/0 | hi" in out
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("command", [("run", "job.yaml"), ("list",), ("describe", "x-1")])
@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_data_directory_that_cannot_be_made_is_named_without_a_traceback(
    tmp_path: Path, command: tuple[str, ...], how: str
) -> None:
    """A data directory under a file cannot be made: exit 2, the path and where it came
    from named, nothing made (a traceback before)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    wanted = blocker / "data"
    (tmp_path / "job.yaml").write_text("name: j\nroles: {w: {command: 'true'}}\n")
    flags = ["--data-dir", str(wanted)] if how == "flag" else []
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(wanted)}
    out = subprocess.run(
        trainfleet(*flags, *command), capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert out.returncode == 2, out.stderr
    assert f"cannot use the data directory {wanted}: Not a directory" in out.stderr
    assert "TRAINFLEET_DATA_DIR" in out.stderr and "Traceback" not in out.stderr
    assert blocker.read_text() == ""
