"""Fractions of a GPU that hold: tasks of ``gpu: 0.5`` as clients of one NVIDIA MPS daemon.

There is no GPU here, so two things are FAKES, as the design allows where no real one can
run: ``tests/programs/fake_mps/nvidia-cuda-mps-control`` plays MPS's control protocol as it
was recorded on an H200 (daemonise, pid file and ``control`` socket in the pipe directory,
``get_server_list``, ``quit``), and ``FakeGpus`` stands in for NVML's memory totals. The
tasks, the engine and the daemon's processes are real; ``scripts/gpu-check.sh`` proves the
real thing on a machine with a GPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import run_cli, wait_for

from trainfleet.backends.local import LocalBackend
from trainfleet.backends.local import processes as local_processes
from trainfleet.backends.local.mps import PID_FILE, find_mps_control, sharing_setting
from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code
from trainfleet.domain.errors import Misconfigured
from trainfleet.domain.records import State
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.spec.models import JobSpec

pytestmark = pytest.mark.usefixtures("reap")

FAKE_MPS = Path(__file__).parent.parent / "programs" / "fake_mps" / "nvidia-cuda-mps-control"
ENGINE_HOST = Path(__file__).parent.parent / "programs" / "engine_host.py"
GIB = 1 << 30
TASK = """\
import json, os, pathlib, sys, time
index = os.environ["TRAINFLEET_INDEX"]
wanted = {name: value for name, value in os.environ.items()
          if name.startswith(("CUDA_", "XLA_", "CUPY_", "TRAINFLEET_GPU"))}
pathlib.Path(f"env-{index}.json").write_text(json.dumps(wanted))
while not pathlib.Path("DONE").exists():
    time.sleep(0.05)
attempt = pathlib.Path(f"attempt-{index}")
first = not attempt.exists()
attempt.touch()
sys.exit(int(first and pathlib.Path("FAIL-FIRST").exists()))
"""


class FakeGpus:
    """A FAKE of NVML's memory totals (no GPU here): each GPU has ``total`` bytes."""

    def __init__(self, total: int = 80 * GIB) -> None:
        self.total = total

    def memory_total(self, gpu: int) -> int | None:
        return self.total


def _spec(replicas: int = 2, gpu: float = 0.5, restart: str = "never") -> JobSpec:
    text = f"""
        name: halves
        restart: {{policy: {restart}, max_restarts: 1, backoff: {{initial: 0}}}}
        roles:
          worker: {{replicas: {replicas}, command: python task.py, resources: {{gpu: {gpu}}}}}
    """
    return JobSpec.model_validate(yaml.safe_load(text))


def _backend(sharing: str | None = None, supervised: bool = False, gpus: str = "0") -> LocalBackend:
    return LocalBackend(
        supervised=supervised,
        gpus=gpus,
        gpu_sharing=sharing,
        mps_control=str(FAKE_MPS),
        gpu_info=FakeGpus(),
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "w"
    folder.mkdir()
    (folder / "task.py").write_text(TASK)
    return folder


def _engine(tmp_path: Path, backend: LocalBackend, supervised: bool = False) -> Engine:
    return engine_at(tmp_path / "data", backend=backend, supervised=supervised)


def _daemon_pid(tmp_path: Path) -> int | None:
    try:
        return int((tmp_path / "data" / "mps" / "gpu0" / "pipe" / PID_FILE).read_text())
    except FileNotFoundError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def _envs(workdir: Path, count: int = 2) -> list[dict[str, str]]:
    paths = [workdir / f"env-{index}.json" for index in range(count)]
    wait_for(lambda: all(path.exists() for path in paths), 30, "the tasks' environments")
    return [json.loads(path.read_text()) for path in paths]


def test_two_halves_share_one_mps_daemon_started_and_stopped_with_them(
    tmp_path: Path, workdir: Path
) -> None:
    engine = _engine(tmp_path, _backend())
    try:
        job = engine.submit(_spec(), workdir, start=True)
        envs = _envs(workdir)
        pid = _daemon_pid(tmp_path)
        assert pid is not None and _alive(pid)
        pipe = tmp_path / "data" / "mps" / "gpu0" / "pipe"
        assert (pipe / "control").exists() and (pipe / "control").stat().st_mode & 0o666 == 0o666
        log = (tmp_path / "data" / "mps" / "gpu0" / "log" / "control.log").read_text()
        assert "CUDA_VISIBLE_DEVICES=0" in log  # started for the one GPU
        for env in envs:
            assert env["CUDA_VISIBLE_DEVICES"] == "0"
            assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
            assert env["CUDA_MPS_LOG_DIRECTORY"] == str(pipe.parent / "log")
            assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40960M"  # half of 80 GiB
            assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
            assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5"
            assert env["CUPY_GPU_MEMORY_LIMIT"] == "50%"
            assert env["TRAINFLEET_GPU_SHARING"] == "mps"
        tasks = engine.tasks(job.id)
        assert all("GPU 0: 0.5 through MPS (40960 MiB, 50% of SMs)" in t.reason for t in tasks)
        assert all(t.gpus == "0" for t in tasks)

        (workdir / "DONE").touch()
        assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
        wait_for(lambda: not _alive(pid), 10, "the daemon to quit after the last task")
        assert _daemon_pid(tmp_path) is None
        log = (tmp_path / "data" / "mps" / "gpu0" / "log" / "control.log").read_text()
        assert "User command: quit" in log and "Exit with status 0" in log
    finally:
        engine.shutdown()
        engine.store.close()


def test_a_client_sees_its_gpu_as_the_daemons_device_0(tmp_path: Path, workdir: Path) -> None:
    """MPS remaps a client's devices to its daemon's (NVIDIA's MPS guide): the daemon of host
    GPU 3 sees GPU 3 alone, and its clients ask for device 0."""
    engine = _engine(tmp_path, _backend(gpus="3"))
    try:
        job = engine.submit(_spec(replicas=1), workdir, start=True)
        (env,) = _envs(workdir, 1)
        assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["TRAINFLEET_GPUS"] == "3"
        assert env["CUDA_MPS_PIPE_DIRECTORY"].endswith("/mps/gpu3/pipe")
        log = (tmp_path / "data" / "mps" / "gpu3" / "log" / "control.log").read_text()
        assert "CUDA_VISIBLE_DEVICES=3" in log
        assert "GPU 3: 0.5 through MPS" in engine.tasks(job.id)[0].reason
        (workdir / "DONE").touch()
        assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
    finally:
        engine.shutdown()
        engine.store.close()


def test_counted_sharing_sets_no_mps_variables_and_says_so(tmp_path: Path, workdir: Path) -> None:
    engine = _engine(tmp_path, _backend("counted"))
    try:
        job = engine.submit(_spec(), workdir, start=True)
        envs = _envs(workdir)
        assert all(not any(name.startswith("CUDA_MPS") for name in env) for env in envs)
        assert all(env["TRAINFLEET_GPU_SHARING"] == "counted" for env in envs)
        assert all(env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5" for env in envs)
        assert _daemon_pid(tmp_path) is None
        tasks = engine.tasks(job.id)
        assert all("GPU 0: 0.5, counted (not enforced)" in t.reason for t in tasks)
        (workdir / "DONE").touch()
        assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
    finally:
        engine.shutdown()
        engine.store.close()


def test_a_fraction_is_refused_without_mps_unless_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_processes, "find_mps_control", lambda: None)
    backend = LocalBackend(gpus="0", gpu_info=FakeGpus())
    with pytest.raises(Unschedulable) as refused:
        backend.check(_spec(gpu=0.3))
    assert str(refused.value).startswith(
        "roles.worker.resources.gpu: 0.3 is a fraction of a GPU, which this machine cannot "
        "enforce: NVIDIA MPS (nvidia-cuda-mps-control) is not installed"
    )
    assert "--gpu-sharing counted" in str(refused.value)
    backend.check(_spec(gpu=1))  # whole GPUs need nothing
    LocalBackend(gpus="0", gpu_sharing="counted").check(_spec(gpu=0.3))
    with pytest.raises(Misconfigured, match="--gpu-sharing: 'shared': expected mps"):
        sharing_setting("shared")


@pytest.mark.skipif(find_mps_control() is not None, reason="MPS is installed here")
def test_the_cli_refuses_a_fraction_without_mps(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINFLEET_GPUS", "0")
    monkeypatch.delenv("TRAINFLEET_GPU_SHARING", raising=False)
    job = tmp_path / "job.yaml"
    job.write_text("name: third\nroles:\n  worker: {command: 'true', resources: {gpu: 0.3}}\n")
    refused = run_cli("run", job)
    assert refused.returncode == 2, refused
    assert "roles.worker.resources.gpu: 0.3 is a fraction of a GPU" in refused.stderr
    assert "nvidia-cuda-mps-control" in refused.stderr and "Traceback" not in refused.stderr
    monkeypatch.setenv("TRAINFLEET_GPU_SHARING", "counted")
    counted = run_cli("run", job)
    assert counted.returncode == 0, counted
    job.write_text("name: more\nroles:\n  worker: {command: 'true', resources: {gpu: 1.5}}\n")
    refused = run_cli("run", job)
    assert refused.returncode == 2 and "ask for whole GPUs" in refused.stderr, refused


def test_a_restarted_engine_adopts_the_daemon_with_its_tasks(tmp_path: Path, workdir: Path) -> None:
    """A server (``engine_host.py``, supervised) is killed with -9 while two halves run; the
    next engine on the data directory adopts them and their daemon, and stops it after them."""
    (workdir / "job.yaml").write_text(yaml.safe_dump(_spec().model_dump(mode="json")))
    env = {**os.environ, "TRAINFLEET_GPUS": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
    env["PATH"] = os.pathsep.join([str(FAKE_MPS.parent), env.get("PATH", "")])
    host = subprocess.Popen(
        [sys.executable, str(ENGINE_HOST), str(tmp_path / "data"), str(workdir / "job.yaml")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert host.stdout is not None
        job_id = host.stdout.readline().strip()
        _envs(workdir)
        pid = _daemon_pid(tmp_path)
        assert pid is not None and _alive(pid)
    finally:
        host.kill()
        host.wait()

    engine = _engine(tmp_path, _backend(supervised=True), supervised=True)
    try:
        assert engine.resume() == [job_id]
        assert _daemon_pid(tmp_path) == pid and _alive(pid)  # the same daemon, adopted
        (workdir / "DONE").touch()
        assert engine.wait(job_id, timeout=60).state == State.SUCCEEDED
        wait_for(lambda: not _alive(pid), 10, "the daemon to quit after the last task")
    finally:
        engine.store.close()


def test_a_daemon_that_dies_fails_its_tasks_with_a_reason_and_starts_again(
    tmp_path: Path, workdir: Path
) -> None:
    engine = _engine(tmp_path, _backend())
    try:
        job = engine.submit(_spec(replicas=1, restart="on-failure"), workdir, start=True)
        _envs(workdir, 1)
        pid = _daemon_pid(tmp_path)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the daemon dies; a real CUDA client then fails
        wait_for(lambda: not _alive(pid), 10, "the daemon gone")
        (workdir / "FAIL-FIRST").touch()
        (workdir / "DONE").touch()
        assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
        (task,) = engine.tasks(job.id)
        assert task.restarts == 1
        events = [e for e in engine.events(job.id) if e.task == "worker/0"]
        restarting = next(
            e for e in events if e.code == Code.GPU_SHARING_LOST and e.state == State.RESTARTING
        )
        assert "the MPS daemon sharing GPU 0 died" in restarting.message
        again = [e for e in events if e.code == Code.STARTED and "restart 1" in e.message]
        assert again and "through MPS" in again[0].message
    finally:
        engine.shutdown()
        engine.store.close()


def test_a_task_with_no_restart_left_ends_gpu_sharing_lost(tmp_path: Path, workdir: Path) -> None:
    engine = _engine(tmp_path, _backend())
    try:
        job = engine.submit(_spec(replicas=1), workdir, start=True)
        _envs(workdir, 1)
        pid = _daemon_pid(tmp_path)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), 10, "the daemon gone")
        (workdir / "FAIL-FIRST").touch()
        (workdir / "DONE").touch()
        assert engine.wait(job.id, timeout=60).state == State.FAILED
        (task,) = engine.tasks(job.id)
        assert task.code == Code.GPU_SHARING_LOST
        assert "the MPS daemon sharing GPU 0 died" in task.reason
    finally:
        engine.shutdown()
        engine.store.close()


def test_the_fake_answers_as_the_recorded_protocol(tmp_path: Path) -> None:
    """The FAKE itself: daemonises at once, answers get_server_list and quit."""
    pipe, logs = tmp_path / "p", tmp_path / "l"
    pipe.mkdir()
    logs.mkdir()
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
    started = subprocess.run([sys.executable, FAKE_MPS, "-d"], env=env, timeout=10)
    assert started.returncode == 0
    wait_for(lambda: (pipe / PID_FILE).exists(), 10, "the pid file")
    assert {"control", "control_lock", "control_privileged", "log"} <= set(os.listdir(pipe))
    ask = lambda command: subprocess.run(  # noqa: E731
        [sys.executable, FAKE_MPS], env=env, input=command, text=True, capture_output=True
    )
    assert ask("get_server_list\n").returncode == 0
    pid = int((pipe / PID_FILE).read_text())
    assert ask("quit\n").returncode == 0
    wait_for(lambda: not _alive(pid), 10, "the fake daemon to quit")
    assert "Exit with status 0" in (logs / "control.log").read_text()


def test_a_share_asked_by_memory_is_that_fraction_of_a_gpu_and_its_mps_limit(
    tmp_path: Path, workdir: Path
) -> None:
    """`gpu_memory: 20Gi` on GPUs of 80 GiB (a fake of NVML's totals, the fake MPS daemon):
    stored as gpu 0.25 beside what was asked, four such tasks share one GPU, each an MPS
    client pinned to its 20 GiB; 81Gi is refused at submission naming the field."""
    engine = _engine(tmp_path, _backend())

    def asking(memory: str) -> JobSpec:
        worker = {"replicas": 4, "command": "python task.py", "resources": {"gpu_memory": memory}}
        return JobSpec.model_validate({"name": "quarters", "roles": {"worker": worker}})

    spec = asking("20Gi")
    try:
        job = engine.submit(spec, workdir, start=True)
        stored = JobSpec.model_validate_json(engine.get(job.id).spec).roles["worker"].resources
        assert (stored.gpu, stored.gpu_memory) == (0.25, 20 * GIB)
        envs = _envs(workdir, 4)
        assert {env["TRAINFLEET_GPUS"] for env in envs} == {"0"}
        assert all(env["TRAINFLEET_GPU_FRACTION"] == "0.25" for env in envs)
        assert all(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M" for env in envs)
        (workdir / "DONE").touch()
        assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
        too_big = asking("81Gi")
        with pytest.raises(Unschedulable, match=r"roles\.worker\.resources\.gpu_memory: 81Gi is"):
            engine.submit(too_big, workdir)
    finally:
        engine.shutdown()
        engine.store.close()
