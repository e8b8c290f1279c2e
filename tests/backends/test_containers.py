"""A task with an image runs as a container: the command line the runtime gets, and the
checks before it starts (its image, its mounts). The containers themselves are run by the
conformance suite (``test_conformance.py``, parameter ``podman``) and the jobs below."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE

import pytest
from container_images import base_image, fake_cdi_gpus
from helpers import trainfleet

from trainfleet.backends.launch import Mount, TaskLaunch
from trainfleet.backends.supervision.containers import (
    Containers,
    ImageUnavailable,
    container_environment,
)
from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec, Resources


def _launch(tmp_path: Path, **fields: object) -> TaskLaunch:
    values: dict[str, object] = {
        "key": ("worker", 1),
        "argv": ["python3", "train.py", "--epochs", "3"],
        "env": {"PATH": "/usr/bin", "SECRET": "s3cr3t-value", "CUDA_VISIBLE_DEVICES": "2,5"},
        "cwd": tmp_path / "work" / "sub",
        "log_path": tmp_path / "log",
        "record": tmp_path / "jobs" / "j-1" / "run" / "worker-1-0",
        "resources": Resources(cpu=1.5, memory=2 * 1024**3),
        "gpus": (2, 5),
        "mounts": (
            Mount(tmp_path / "work", tmp_path / "work"),
            Mount(tmp_path, Path("/env"), read_only=True),
        ),
        "image": "localhost/some/image:1",
    }
    values.update(fields)
    return TaskLaunch(**values)  # type: ignore[arg-type]


def test_the_runtime_command_line(tmp_path: Path) -> None:
    argv = Containers("/usr/bin/podman").argv(_launch(tmp_path), "trainfleet-j-1-worker-1-0")
    image = argv.index("localhost/some/image:1")
    options, command = argv[:image], argv[image + 1 :]
    assert options[:2] == ["/usr/bin/podman", "run"]
    # The command replaces the image's ENTRYPOINT, as on Kubernetes; nothing from the image
    # on is read as the runtime's options.
    assert options[-2:] == ['--entrypoint=["python3"]', "--"]
    assert command == ["train.py", "--epochs", "3"]
    joined = " ".join(options)
    assert "--network host" in joined and "--init" in options and "--replace" in options
    # Kept once it ends: its shim reads how it ended, then removes it.
    assert "--rm" not in options
    assert f"--workdir {tmp_path}/work/sub" in joined
    assert f"--volume {tmp_path}/work:{tmp_path}/work " in joined + " "
    assert f"--volume {tmp_path}:/env:ro" in joined
    assert "--cpus 1.5" in joined and f"--memory {2 * 1024**3}" in joined
    assert "--device nvidia.com/gpu=2" in joined and "--device nvidia.com/gpu=5" in joined
    # Values travel in the runtime's environment, never on its command line (ps shows it).
    assert "s3cr3t-value" not in joined and "--env=SECRET" in options
    # The container holds only its two GPUs: it sees them as 0 and 1.
    assert "--env=CUDA_VISIBLE_DEVICES=0,1" in options


def test_a_container_has_its_own_host_name_and_knows_its_peers(tmp_path: Path) -> None:
    hosts = (("j-1-worker-0", "127.0.0.1"), ("j-1-ps-0", "trainfleet-host-1.invalid"))
    launch = _launch(tmp_path, hostname="j-1-worker-1", hosts=hosts)
    joined = " ".join(Containers("/usr/bin/podman").argv(launch, "trainfleet-j-1-worker-1-0"))
    assert "--hostname j-1-worker-1 --add-host j-1-worker-0:127.0.0.1 " in joined
    assert "j-1-ps-0" not in joined, "an address still to come is no address for /etc/hosts"
    docker = " ".join(Containers("/usr/bin/docker").argv(launch, "trainfleet-j-1-worker-1-0"))
    assert "--hostname" not in docker, "docker refuses one on the host's network"


def test_args_alone_go_to_the_image_entrypoint(tmp_path: Path) -> None:
    launch = _launch(tmp_path, argv=["--epochs", "3"], entrypoint=True)
    argv = Containers("podman").argv(launch, "name")
    assert "--entrypoint" not in argv
    assert argv[-3:] == ["localhost/some/image:1", "--epochs", "3"]


def test_a_task_without_gpus_keeps_its_environment(tmp_path: Path) -> None:
    launch = _launch(tmp_path, gpus=(), env={"CUDA_VISIBLE_DEVICES": ""})
    assert container_environment(launch) == {"CUDA_VISIBLE_DEVICES": ""}
    assert "--device" not in Containers("podman").argv(launch, "name")


def test_a_missing_mount_source_is_refused_before_the_start(tmp_path: Path) -> None:
    with pytest.raises(ImageUnavailable, match=f"mount source {tmp_path}/work does not exist"):
        Containers("podman").make_ready(_launch(tmp_path))


def test_no_runtime_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ImageUnavailable, match="no container runtime: install podman"):
        _ = Containers().runtime


def test_an_image_that_cannot_be_found_or_pulled(tmp_path: Path) -> None:
    base_image()  # podman is here
    (tmp_path / "work" / "sub").mkdir(parents=True)
    launch = _launch(tmp_path, image="localhost:1/trainfleet/nowhere:1")
    with pytest.raises(ImageUnavailable) as raised:
        Containers().make_ready(launch)
    message = str(raised.value)
    assert message.startswith(
        "image 'localhost:1/trainfleet/nowhere:1' not found locally and pull failed: "
    )


def _spec(image: str, command: str | list[str] | None, **role: object) -> JobSpec:
    worker = {"image": image, **({"command": command} if command else {}), **role}
    return JobSpec.model_validate({"name": "boxed", "roles": {"worker": worker}})


@pytest.fixture(scope="module")
def entrypoint_image() -> Iterator[str]:
    """The base image with ENTRYPOINT [echo, from-entrypoint] and CMD [default-cmd]."""
    base, name = base_image(), f"trainfleet-entrypoint-{os.getpid()}"
    image = f"localhost/trainfleet-test/entrypoint:{os.getpid()}"
    subprocess.run(["podman", "create", "--name", name, base, "true"], check=True, stdout=PIPE)
    changes = ['ENTRYPOINT ["echo", "from-entrypoint"]', 'CMD ["default-cmd"]']
    commit = ["podman", "commit", "--quiet", *(f"--change={c}" for c in changes), name, image]
    subprocess.run(commit, check=True, stdout=PIPE)
    subprocess.run(["podman", "rm", name], check=True, stdout=PIPE)
    yield image
    subprocess.run(["podman", "rmi", "--force", image], check=False, stdout=PIPE)


SHOW_GPUS = [
    "python3",
    "-c",
    "import os; print(*sorted(k for k in os.environ if k.startswith('FAKE_GPU_')), "
    "'cuda=' + os.environ['CUDA_VISIBLE_DEVICES'])",
]


def test_each_container_holds_its_own_gpus_seen_from_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tasks of two GPUs each on a machine of four: each container is given its two
    devices (CDI, fake ones: see fake_cdi_gpus) and sees them as 0 and 1."""
    image = base_image()
    monkeypatch.setenv("TRAINFLEET_GPUS", "0,1,2,3")
    engine = engine_at(tmp_path / "data")
    try:
        with fake_cdi_gpus():
            spec = _spec(image, SHOW_GPUS, replicas=2, resources={"gpu": 2})
            job = engine.submit(spec, tmp_path, start=True)
            ended = engine.wait(job.id, timeout=120)
            assert ended.state == State.SUCCEEDED, engine.describe(job.id)
        seen = [engine.log_path(job.id, "worker", n).read_text().split() for n in (0, 1)]
    finally:
        engine.store.close()
    assert [words[-1] for words in seen] == ["cuda=0,1", "cuda=0,1"], seen
    given = [{word.split("=")[0] for word in words[:-1]} for words in seen]
    assert [len(devices) for devices in given] == [2, 2], seen
    assert given[0] | given[1] == {f"FAKE_GPU_{n}" for n in range(4)}, seen


@pytest.mark.parametrize(
    ("role", "printed"),
    [
        ({}, "from-entrypoint default-cmd"),  # ENTRYPOINT and CMD
        ({"args": ["--lr", "0.1"]}, "from-entrypoint --lr 0.1"),  # ENTRYPOINT and args
        ({"command": ["echo", "own"], "args": ["words"]}, "own words"),  # command replaces it
    ],
)
def test_the_image_entrypoint_as_kubernetes_runs_it(
    engine: Engine, tmp_path: Path, entrypoint_image: str, role: dict[str, object], printed: str
) -> None:
    command = role.pop("command", None)
    job = engine.submit(_spec(entrypoint_image, command, **role), tmp_path, start=True)  # type: ignore[arg-type]
    assert engine.wait(job.id, timeout=120).state == State.SUCCEEDED, engine.describe(job.id)
    assert engine.log_path(job.id, "worker", 0).read_text() == printed + "\n"


def test_a_job_with_an_image_runs_in_its_container(engine: Engine, tmp_path: Path) -> None:
    """The task runs the image's Python (Debian's, not this one), in the job's directory,
    with the job's environment and none of this process's."""
    image = base_image()
    os.environ["TRAINFLEET_TEST_HOST_ONLY"] = "host-secret"
    try:
        (tmp_path / "show.py").write_text(
            "import os, sys\n"
            "print(sys.executable, sys.version_info[:2], os.getcwd())\n"
            "print(os.environ.get('TRAINFLEET_TEST_HOST_ONLY'), os.environ['TRAINFLEET_ROLE'])\n"
            "open('written-inside', 'w').write('yes')\n"
        )
        job = engine.submit(_spec(image, "python3 show.py"), tmp_path, start=True)
        assert engine.wait(job.id, timeout=120).state == State.SUCCEEDED, engine.describe(job.id)
    finally:
        del os.environ["TRAINFLEET_TEST_HOST_ONLY"]
    log = engine.log_path(job.id, "worker", 0).read_text()
    started = [event.message for event in engine.describe(job.id).events if event.task]
    assert started[0].startswith(f"started, container trainfleet-{job.id}-worker-0-0 (pid ")
    assert f"/usr/bin/python3 (3, 11) {tmp_path}" in log, log
    assert "None worker" in log, log
    assert (tmp_path / "written-inside").read_text() == "yes"


def test_each_task_s_container_has_its_own_host_name(engine: Engine, tmp_path: Path) -> None:
    """Two tasks in containers on the host's network: each has the host name
    `<job>-worker-<index>` (not the machine's, not each other's), and finds the other by its
    name, as pods of one job do."""
    image = base_image()
    command = "hostname; getent hosts $(hostname | sed 's/-[01]$//')-$((1 - TRAINFLEET_INDEX))"
    spec = _spec(image, ["sh", "-c", command], replicas=2)
    job = engine.submit(spec, tmp_path, start=True)
    assert engine.wait(job.id, timeout=120).state == State.SUCCEEDED, engine.describe(job.id)
    for index in (0, 1):
        log = engine.log_path(job.id, "worker", index).read_text().split()
        assert log[0] == f"{job.id}-worker-{index}", log
        assert log[1:] == ["127.0.0.1", f"{job.id}-worker-{1 - index}"], log


def test_trainfleet_run_gives_a_container_the_image_s_environment_not_the_shell_s(
    tmp_path: Path,
) -> None:
    """`trainfleet run` passes the user's whole shell to a process, but a container gets its
    image's ENV (its PATH: a program in the image's own folders runs), the job's `env` and
    trainfleet's variables, as Kubernetes gives a pod; nothing else of the shell."""
    image = base_image()
    (tmp_path / "job.yaml").write_text(
        f"name: env\nimage: {image}\nenv: {{MINE: from-the-job}}\n"
        "roles:\n  worker: {command: ['sh', '-c', 'echo $PATH; echo $MINE $SHELL_ONLY $HOME "
        "$TRAINFLEET_ROLE']}\n"
    )
    env = {
        **os.environ,
        "PATH": f"/nowhere/bin:{os.environ['PATH']}",
        "SHELL_ONLY": "from-the-shell",
        "HOME": "/root/elsewhere",
        "TRAINFLEET_DATA_DIR": str(tmp_path / "data"),
    }
    done = subprocess.run(
        trainfleet("run", tmp_path / "job.yaml"), env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    said = [line.split("| ", 1)[1] for line in lines if line.startswith("worker/0 ")]
    assert said[0] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", said
    assert said[1].split() == ["from-the-job", "/root", "worker"], said


@pytest.mark.parametrize(
    ("pull", "message"),
    [
        (
            "if-missing",
            "image 'localhost:1/trainfleet/nowhere:1' not found locally and pull failed",
        ),
        ("never", "image 'localhost:1/trainfleet/nowhere:1' not found locally (pull: never)"),
    ],
)
def test_a_missing_image_fails_the_job_with_the_reason(
    engine: Engine, tmp_path: Path, pull: str, message: str
) -> None:
    base_image()
    spec = _spec("localhost:1/trainfleet/nowhere:1", "true", pull=pull)
    ended = engine.wait(engine.submit(spec, tmp_path, start=True).id, timeout=120)
    assert ended.state == State.FAILED
    assert message in ended.reason
    (task,) = engine.tasks(ended.id)
    assert task.code == Code.COULD_NOT_START and message in task.reason


def test_pull_always_pulls_at_every_start(tmp_path: Path) -> None:
    """A present image with ``pull: always`` is still pulled (and here, with no registry
    to pull from, refused), where ``if-missing`` takes it as it is."""
    image = base_image()
    (tmp_path / "work" / "sub").mkdir(parents=True)
    Containers().make_ready(_launch(tmp_path, image=image, pull="if-missing"))
    with pytest.raises(ImageUnavailable, match="not found locally and pull failed"):
        Containers().make_ready(_launch(tmp_path, image=image, pull="always"))


def test_the_config_file_chooses_the_runtime(tmp_path: Path, job_file, monkeypatch) -> None:
    """``container_runtime:`` in the config file; a runtime trainfleet does not know is
    refused before anything runs, naming the key."""
    from helpers import run_cli

    from trainfleet.control.assembly import backend_of
    from trainfleet.control.settings import Settings

    config = tmp_path / "config" / "trainfleet" / "config.yaml"
    config.parent.mkdir(parents=True)
    env = {"XDG_CONFIG_HOME": str(config.parent.parent)}
    config.write_text("container_runtime: docker\n")
    backend = backend_of(Settings.resolve(env))
    assert backend.containers.runtime == "docker"  # type: ignore[attr-defined]
    config.write_text("container_runtime: rkt\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", env["XDG_CONFIG_HOME"])
    result = run_cli("run", job_file("name: boxed\nroles: {w: {command: 'true'}}\n"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: {config}: container_runtime: "), result.stderr
    assert "Traceback" not in result.stderr


def test_a_dry_run_shows_each_task_s_image(tmp_path: Path) -> None:
    from helpers import run_cli

    job = tmp_path / "job.yaml"
    job.write_text(
        "name: boxed\nimage: train:1\nroles:\n"
        "  worker: {args: [--lr, '0.1']}\n  ps: {image: serve:2, command: [serve, --port, '1']}\n"
    )
    result = run_cli("run", "--dry-run", job)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"worker/0  <ENTRYPOINT of the image> --lr 0.1  (in {tmp_path}, image train:1)" in lines
    assert f"ps/0  serve --port 1  (in {tmp_path}, image serve:2)" in lines


def test_a_slow_pull_holds_up_only_its_own_image(tmp_path: Path) -> None:
    """A fake runtime (a shell script; no registry is reachable here to pull from slowly):
    its pull of ``slow`` takes 3 s and ``fast`` is present. Tasks of ``fast`` start while
    ``slow`` is still being pulled, and ``slow`` is pulled once for two tasks."""
    import threading
    import time

    runtime, pulls = tmp_path / "runtime", tmp_path / "pulls"
    runtime.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = pull ]; then echo "$3" >> {pulls}; sleep 3; exit 0; fi\n'
        '[ "$3" = fast ]\n'  # image inspect IMAGE: only "fast" is here
    )
    runtime.chmod(0o755)
    (tmp_path / "work" / "sub").mkdir(parents=True)
    containers = Containers(str(runtime))
    slow = [
        threading.Thread(target=containers.make_ready, args=(_launch(tmp_path, image="slow"),))
        for _ in range(2)
    ]
    for thread in slow:
        thread.start()
    time.sleep(0.5)  # both wait on the pull of slow
    started = time.monotonic()
    containers.make_ready(_launch(tmp_path, image="fast"))
    assert time.monotonic() - started < 2, "fast waited for the pull of slow"
    for thread in slow:
        thread.join()
    assert pulls.read_text().split() == ["slow"], "pulled once for both tasks"


@pytest.mark.parametrize("image", ["torch:2.13.0", "tensorflow:2.21.0"])
def test_the_project_s_framework_images_keep_no_build_settings(image: str) -> None:
    """`pip install` in a task must not look for the build's CA file or wheel folder: the
    images `scripts/images.sh` builds carry no PIP_* in their ENV."""
    base_image()  # podman and the images are here (built together)
    shown = subprocess.run(
        [
            "podman",
            "image",
            "inspect",
            "--format",
            "{{json .Config.Env}}",
            f"localhost/trainfleet/{image}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "PIP_" not in shown.stdout, shown.stdout


PYTORCHJOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: from-image}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - {{name: pytorch, image: "{image}", command: [python3, {program}]{more}}}
"""


def test_a_manifest_runs_in_its_image_s_workdir_and_a_job_file_in_its_folder(
    workdir_image: str, tmp_path: Path
) -> None:
    """A PyTorchJob whose program is in the image (`python3 train.py`, WORKDIR /app) runs
    there, as Kubernetes runs it; `workingDir` overrides it; on an image that declares no
    WORKDIR it runs in the job's folder (the repository's own examples); a trainfleet job
    file with the first image runs in the job's folder unless it says `image_workdir: true`."""
    env = {**os.environ, "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}

    def run(text: str) -> str:
        (tmp_path / "job.yaml").write_text(text)
        done = subprocess.run(
            trainfleet("run", tmp_path / "job.yaml"), env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    image = workdir_image
    assert "| in /app" in run(PYTORCHJOB.format(image=image, program="train.py", more=""))
    other = PYTORCHJOB.format(image=image, program="/app/train.py", more=", workingDir: /tmp")
    assert "| in /tmp" in run(other)
    (tmp_path / "train.py").write_text("import os; print('in', os.getcwd())")
    plain = PYTORCHJOB.format(image=base_image(), program="train.py", more="")
    assert f"| in {tmp_path}" in run(plain)
    job = f"name: mine\nimage: {image}\nroles:\n  worker: {{command: python3 /app/train.py}}\n"
    assert f"| in {tmp_path}" in run(job)
    assert "| in /app" in run(job.replace("command:", "image_workdir: true, command:"))
