"""Jobs on a real Slurm cluster (three nodes on this machine), through the real CLI.

The same job files as on this machine: the examples train over several nodes, a job
cancelled with ``scancel`` from outside ends cancelled, and a node that dies mid-job
(its slurmd and every process of its steps killed) leads to the restart its policy promises.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from container_images import base_image, fake_cdi_gpus
from helpers import trainfleet, wait_for
from slurm_cluster import SlurmUser
from slurm_nodes import NODES, SCRIPT

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SOURCE = Path(__file__).resolve().parents[2] / "src"
TIMEOUT = 420

pytestmark = pytest.mark.slow


def cli(user: SlurmUser, *args: str | Path, timeout: float = TIMEOUT) -> str:
    done = subprocess.run(
        trainfleet(*args), env=user.env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def job_id_in(stdout: str) -> str:
    found = re.search(r"job (\S+): logs in", stdout)
    assert found, stdout
    return found[1]


def hosts_of(details: dict[str, object]) -> set[str]:
    tasks = details["tasks"]
    assert isinstance(tasks, list)
    return {task["address"].rpartition(":")[0] for task in tasks}


@pytest.mark.parametrize(
    ("example", "result"),
    [
        ("tf_ingraph", r"client/0\s*\| w=2\.0\d b=10\.0\d"),
        ("tf_ps_strategy", r"chief/0\s*\| final loss=0\.0\d+ w=(1\.9|2\.0)\d* b=(9\.9|10\.0)"),
        ("torch_ddp", r"master/0\s*\| done: 3 ranks"),
    ],
)
def test_example_trains_over_several_nodes(
    slurm_user: SlurmUser, example: str, result: str
) -> None:
    if example.startswith("tf"):
        pytest.importorskip("tensorflow")
    else:
        pytest.importorskip("torch")
    stdout = cli(slurm_user, "run", EXAMPLES / example / "job.yaml")
    assert re.search(result, stdout), stdout
    details = slurm_user.describe(job_id_in(stdout))
    hosts = hosts_of(details)
    assert len(hosts) >= 2 and hosts <= set(NODES), details["tasks"]
    assert all(task["state"] == "succeeded" for task in details["tasks"])  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("job_file", "result"),
    [
        ("tf_multiworker/job-image.yaml", r"worker/1\s*\| worker 1: final loss=0\.0\d+ w="),
        ("torch_ddp/pytorchjob.yaml", r"master/0\s*\| done: 3 ranks"),
    ],
)
def test_an_example_in_containers_over_several_nodes(
    slurm_user: SlurmUser, job_file: str, result: str
) -> None:
    """The same image jobs as on this machine (TensorFlow, and PyTorch as a Kubeflow
    PyTorchJob): each task's bootstrap runs it through the node's podman, with the job's
    (shared) folder mounted."""
    base_image()
    stdout = cli(slurm_user, "run", EXAMPLES / job_file)
    assert re.search(result, stdout), stdout
    details = slurm_user.describe(job_id_in(stdout))
    assert len(hosts_of(details)) >= 2, details["tasks"]
    assert all(task["state"] == "succeeded" for task in details["tasks"])  # type: ignore[union-attr]


def _job_file(folder: Path, text: str) -> Path:
    path = folder / "job.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def _slurm_job(user: SlurmUser, job_id: str) -> str:
    for line in user.squeue("-t", "all", "-o", "%i %j").splitlines():
        slurm_id, name = line.split()
        if name == f"trainfleet-{job_id}":
            return slurm_id.split("+")[0]
    return ""


def _running(user: SlurmUser, job_id: str) -> dict[str, object] | None:
    details = user.describe(job_id)
    job = details["job"]
    assert isinstance(job, dict)
    return details if job["state"] == "running" else None


def _ended(user: SlurmUser, job_id: str) -> dict[str, object] | None:
    details = user.describe(job_id)
    job = details["job"]
    assert isinstance(job, dict)
    return details if job["state"] in ("succeeded", "failed", "cancelled") else None


def _submit(user: SlurmUser, job_file: Path) -> str:
    submitted = json.loads(cli(user, "submit", job_file, "--output", "json"))
    return str(submitted["id"])


def test_logs_while_running_then_scancel_from_outside_is_cancelled(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    job_file = _job_file(
        tmp_path,
        """
        name: cancel-me
        restart: {policy: on-failure}
        roles:
          worker:
            replicas: 2
            command: "bash -c 'echo hello from $SLURMD_NODENAME; exec sleep 600'"
        """,
    )
    job_id = _submit(slurm_user, job_file)
    wait_for(lambda: _running(slurm_user, job_id), timeout=120, what="the job to run")
    wait_for(
        lambda: cli(slurm_user, "logs", job_id).count("hello from tf-node") == 2,
        timeout=30,
        what="both tasks' lines in `trainfleet logs`",
    )
    subprocess.run(["scancel", _slurm_job(slurm_user, job_id)], env=slurm_user.env, check=True)

    details = wait_for(lambda: _ended(slurm_user, job_id), timeout=60, what="the job to end")
    assert isinstance(details, dict)
    assert details["job"]["state"] == "cancelled", details
    assert "cancelled outside trainfleet" in details["job"]["reason"], details
    assert all(task["restarts"] == 0 for task in details["tasks"]), "cancelled, not restarted"
    wait_for(lambda: not _slurm_processes("sleep 600"), timeout=30, what="the tasks to stop")
    assert cli(slurm_user, "logs", job_id).count("hello from tf-node") == 2, "logs outlive"


def test_stop_ends_the_slurm_job(slurm_user: SlurmUser, tmp_path: Path) -> None:
    job_file = _job_file(
        tmp_path,
        """
        name: stop-me
        roles:
          ps: {command: sleep 600}
          worker: {replicas: 2, command: sleep 600, resources: {cpu: 2}}
        """,
    )
    job_id = _submit(slurm_user, job_file)
    wait_for(lambda: _running(slurm_user, job_id), timeout=120, what="the job to run")
    slurm_job = _slurm_job(slurm_user, job_id)
    assert slurm_user.squeue("-j", slurm_job, "-o", "%i").count("+") == 2, "two components"
    cli(slurm_user, "stop", job_id)

    details = _ended(slurm_user, job_id)
    assert details is not None and details["job"]["state"] == "cancelled", details
    wait_for(
        lambda: (
            set(slurm_user.squeue("-t", "all", "-j", slurm_job, "-o", "%T").split())
            <= {"COMPLETED", "CANCELLED", "FAILED"}
        ),
        timeout=30,
        what="the Slurm job to end once its steps have",
    )
    wait_for(lambda: not _slurm_processes("sleep 600"), timeout=30, what="the tasks to stop")


def test_gpus_come_from_slurm(slurm_user: SlurmUser, tmp_path: Path) -> None:
    job_file = _job_file(
        tmp_path,
        """
        name: gpus
        roles:
          worker:
            replicas: 2
            command: "bash -c 'echo gpus=$CUDA_VISIBLE_DEVICES/$TRAINFLEET_GPUS'"
            resources: {gpu: 1}
          ps: {command: "bash -c 'echo gpus=[$CUDA_VISIBLE_DEVICES]'"}
        """,
    )
    stdout = cli(slurm_user, "run", job_file)
    workers = re.findall(r"worker/\d\s*\| gpus=(\d)/(\d)", stdout)
    assert len(workers) == 2 and all(a == b for a, b in workers), stdout
    assert re.search(r"ps/0\s*\| gpus=\[\]", stdout), stdout


def test_a_container_holds_the_gpus_slurm_gave_its_step(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """Each worker's container is given the GPU of its step (CDI, fake ones: see
    fake_cdi_gpus) and sees it as 0; the ps, without GPUs, is given none."""
    image = base_image()
    show = (
        "import os; print(*sorted(k for k in os.environ if k.startswith('FAKE_GPU_')), "
        "'cuda=' + os.environ.get('CUDA_VISIBLE_DEVICES', ''))"
    )
    job_file = _job_file(
        tmp_path,
        f"""
        name: container-gpus
        image: {image}
        roles:
          worker:
            replicas: 2
            command: [python3, -c, "{show}"]
            resources: {{gpu: 1}}
          ps: {{command: [python3, -c, "{show}"]}}
        """,
    )
    with fake_cdi_gpus():
        stdout = cli(slurm_user, "run", job_file)
    workers = re.findall(r"worker/\d\s*\| (FAKE_GPU_\d) cuda=(\S*)", stdout)
    assert len(workers) == 2 and all(cuda == "0" for _, cuda in workers), stdout
    assert re.search(r"ps/0\s*\| cuda=$", stdout, re.MULTILINE), stdout


def _slurm_processes(command: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if " ".join(process.info["cmdline"] or []) == command and (
                "SLURMD_NODENAME" in process.environ()
            ):
                found.append(process)
    return found


def kill_node(user: SlurmUser, node: str) -> None:
    """Kill one node as a power cut would: its slurmd and every process of its job steps."""
    subprocess.run(["bash", str(SCRIPT), "node-kill", node], env=user.env, check=True)


def test_a_lost_node_restarts_the_job_by_default(slurm_user: SlurmUser, tmp_path: Path) -> None:
    """No restart policy: a lost node is an infrastructure failure, restarted anyway, the
    restart event coded node-lost and naming the node; the tasks are told their attempt
    and resume from the step worker 0 committed (in the job's checkpoint folder, on the
    shared file system) before its node died."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "work.py").write_text(
        textwrap.dedent(
            f"""
            import os, sys, time
            sys.path.insert(0, {str(SOURCE)!r})  # trainfleet.checkpoint: standard library only
            from trainfleet import checkpoint
            marks, me = os.environ["MARKS"], os.environ["TRAINFLEET_INDEX"]
            attempt = int(os.environ["TRAINFLEET_RESTART"])
            resume = os.environ.get("TRAINFLEET_RESUME_FROM", "")
            with open(f"{{marks}}/{{me}}-{{attempt}}-{{os.environ['SLURMD_NODENAME']}}", "w") as f:
                f.write(resume)
            if attempt == 0 and me == "0":
                for step in range(3):
                    with checkpoint.save(step) as folder:
                        (folder / "state").write_text(str(step))
            time.sleep(600 if attempt == 0 else 1)
            """
        )
    )
    job_file = _job_file(
        tmp_path,
        f"""
        name: lose-a-node
        env: {{MARKS: "{marks}"}}
        restart: {{backoff: {{initial: 1}}}}
        roles:
          worker: {{replicas: 3, command: python work.py}}
        """,
    )
    job_id = _submit(slurm_user, job_file)
    details = wait_for(lambda: _running(slurm_user, job_id), timeout=120, what="the job to run")
    assert isinstance(details, dict)
    checkpoints = slurm_user.data_dir / "jobs" / job_id / "tasks" / "checkpoints"
    wait_for(
        lambda: (checkpoints / "step-2" / "COMMITTED").exists(),
        timeout=60,
        what="worker 0 to commit step 2",
    )
    # The node of worker 0, which wrote the checkpoint: it outlives its node.
    victim = next(
        task["address"].rpartition(":")[0]
        for task in details["tasks"]  # type: ignore[attr-defined]
        if task["index"] == 0
    )
    kill_node(slurm_user, victim)
    started = time.monotonic()

    details = wait_for(lambda: _ended(slurm_user, job_id), timeout=240, what="the job to end")
    assert isinstance(details, dict)
    assert details["job"]["state"] == "succeeded", details
    assert all(task["restarts"] == 1 for task in details["tasks"]), details["tasks"]
    lost = [e for e in details["events"] if e["code"] == "node-lost"]
    assert lost and all(e["state"] == "restarting" for e in lost), details["events"]
    said = [e["message"] for e in lost]
    # The node is named as the one that failed, or (where Slurm, asked later on a busy
    # machine, no longer holds it down) as the lost task's
    named = (f"node {victim} failed", f"on {victim} ")
    assert any("NODE_FAIL" in m and any(n in m for n in named) for m in said), said
    assert victim not in hosts_of(details), "restarted on the node that died"
    second = sorted(marks.glob("*-1-*"))
    assert len(second) == 3  # every task ran its second attempt
    told = {path.name: path.read_text() for path in second}
    assert set(told.values()) == {str(checkpoints / "step-2")}, told
    assert all(path.read_text() == "" for path in marks.glob("*-0-*")), "nothing to resume"
    print(f"recovered {time.monotonic() - started:.0f}s after the node died")


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("{gpu: 3}", r"gpu"),  # 2 per node (a fraction runs: see test_slurm_shards.py)
        ("{cpu: 64}", r"cpu"),
    ],
)
def test_a_job_slurm_can_never_run_is_refused_at_once(
    slurm_user: SlurmUser, tmp_path: Path, resources: str, message: str
) -> None:
    job_file = _job_file(
        tmp_path,
        f"""
        name: never
        roles:
          worker: {{command: "true", resources: {resources}}}
        """,
    )
    done = subprocess.run(
        trainfleet("run", job_file), env=slurm_user.env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(message, done.stderr) and "Traceback" not in done.stderr, done.stderr
    submitted = slurm_user.squeue("-t", "all", "-o", "%j").split()
    assert not any(name.startswith("trainfleet-never-") for name in submitted)


def test_a_deadline_stops_the_job_on_slurm(slurm_user: SlurmUser, tmp_path: Path) -> None:
    job_file = _job_file(
        tmp_path,
        """
        name: late
        deadline: 4
        grace_period: 2
        roles:
          worker: {replicas: 2, command: "sleep 601"}
        """,
    )
    done = subprocess.run(
        trainfleet("run", job_file), env=slurm_user.env, capture_output=True, text=True
    )
    assert done.returncode != 0, done.stdout
    details = slurm_user.describe(job_id_in(done.stdout))
    assert details["job"]["state"] == "failed", details  # type: ignore[index]
    assert "deadline exceeded: 4s" in details["job"]["reason"], details  # type: ignore[index]
    wait_for(lambda: not _slurm_processes("sleep 601"), timeout=30, what="the tasks to stop")


def test_stored_jobs_stay_readable_while_slurm_is_unreachable(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """Reading jobs asks nothing of Slurm; submitting to an unreachable Slurm says so (exit 2)."""
    job_file = _job_file(
        tmp_path,
        """
        name: hello
        roles:
          worker: {command: "echo hello from slurm"}
        """,
    )
    job_id = job_id_in(cli(slurm_user, "run", job_file))
    conf = Path(slurm_user.env["SLURM_CONF"]).read_text()
    unreachable = tmp_path / "unreachable" / "slurm.conf"
    unreachable.parent.mkdir()
    unreachable.write_text(re.sub(r"(?m)^SlurmctldPort=.*$", "SlurmctldPort=9", conf))
    down = SlurmUser({**slurm_user.env, "SLURM_CONF": str(unreachable)}, slurm_user.data_dir)

    assert job_id in cli(down, "list")
    assert down.describe(job_id)["job"]["state"] == "succeeded"  # type: ignore[index]
    assert "hello from slurm" in cli(down, "logs", job_id)
    done = subprocess.run(
        trainfleet("run", job_file), env=down.env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.match(r"error: Slurm: sinfo failed: .*Unable to contact", done.stderr), done.stderr
    assert "Traceback" not in done.stderr
    assert len(json.loads(cli(down, "list", "--output", "json"))) == 1  # nothing new stored


def test_a_partition_bounds_where_jobs_run_and_what_they_may_ask(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """``slurm.partition: small`` (tf-node1 only): tasks land there, and admission counts only
    its nodes; a partition Slurm lacks is named as such (exit 2)."""
    config = Path(slurm_user.env["XDG_CONFIG_HOME"]) / "trainfleet" / "config.yaml"
    config.write_text("backend: slurm\nslurm: {partition: small, poll_interval: 0.2}\n")
    fits = _job_file(tmp_path, "name: fits\nroles:\n  worker: {replicas: 2, command: 'true'}\n")
    details = slurm_user.describe(job_id_in(cli(slurm_user, "run", fits)))
    assert details["job"]["state"] == "succeeded"  # type: ignore[index]
    assert hosts_of(details) == {"tf-node1"}

    (tmp_path / "big").mkdir()
    too_big = _job_file(
        tmp_path / "big",
        "name: big\nroles:\n  worker: {replicas: 2, command: 'true', resources: {cpu: 3}}\n",
    )
    refused = subprocess.run(
        trainfleet("run", too_big), env=slurm_user.env, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "cpu" in refused.stderr, refused.stderr

    config.write_text("backend: slurm\nslurm: {partition: nope}\n")
    unknown = subprocess.run(
        trainfleet("run", fits), env=slurm_user.env, capture_output=True, text=True
    )
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert unknown.stderr == (
        "error: slurm.partition: Slurm has no partition 'nope' "
        "(partitions: trainfleet*, small, preemptible, urgent)\n"
    )
