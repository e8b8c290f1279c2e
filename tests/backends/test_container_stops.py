"""No container outlives its task, whatever moment of its start it is stopped at.

``podman run`` creates a container (its monitor, ``conmon``, and the OCI runtime's
``runc init`` waiting), then starts it. A stop in between is no signal for any process of
the task's: podman's client ends (SIGTERM: with 0; SIGKILL) and leaves the container
behind, created or initialized, its monitor running. Each test here stops real containers
at random moments of their start, and at the moment their monitor appears, and then looks
for what is left: the container (``podman ps -a``), a process that names it (its monitor),
a process in the job's folder (``runc init``, the task), a process with the attempt's mark.
The seed of each run is in every assertion's message (``TRAINFLEET_TEST_SEED`` replays it).
"""

from __future__ import annotations

import marshal
import os
import queue
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from container_images import base_image
from helpers import trainfleet, wait_for

from trainfleet.backends.api import NotStarted, Outside, TaskHandle
from trainfleet.backends.launch import JobLaunch
from trainfleet.backends.local import LocalBackend
from trainfleet.backends.slurm import bootstrap
from trainfleet.backends.supervision import SHIM
from trainfleet.backends.supervision.containers import Containers
from trainfleet.backends.supervision.shim import CONTAINER_SECONDS, RUNTIME_SECONDS
from trainfleet.datadir import records
from trainfleet.datadir.layout import DataDir
from trainfleet.scheduling.placement import Placement, TaskKey, TaskSlot, task_keys
from trainfleet.spec.models import JobSpec

WORKER: TaskKey = ("worker", 0)
CATCH_TERM = "trap 'exit 7' TERM; echo ready; while :; do sleep 0.1; done"
ROUNDS = 10
REPLICAS = 3
EXIT_SECONDS = RUNTIME_SECONDS + CONTAINER_SECONDS + 10.0
"""A stopped task's exit is recorded this soon: the shim asks the container how it ended
(one runtime call at most), then removes it (bounded apart), with time to spare (a CI run
under load saw the bootstrap record nothing in 30 s, what it may take by these bounds)."""
GRACEFUL_SECONDS = 30.0
"""A task that exits on SIGTERM ends this soon after a graceful stop, whenever it came, its
container's removal included (one CI run saw one of three not ended after 15 s, which no
run here repeated: what was left is in the message now). A stop that never reached it
leaves the task running for ever."""


def _seed() -> int:
    given = os.environ.get("TRAINFLEET_TEST_SEED")
    return int(given) if given else random.randrange(1 << 32)


class Reports:
    def __init__(self) -> None:
        self.exits: queue.Queue[tuple[TaskKey, int]] = queue.Queue()

    def exited(self, key: TaskKey, returncode: int, outside: Outside | None = None) -> None:
        self.exits.put((key, returncode))

    def placed(self, key: TaskKey, address: str, note: str) -> None:
        pass

    def next(self, timeout: float = EXIT_SECONDS) -> int | None:
        try:
            return self.exits.get(timeout=timeout)[1]
        except queue.Empty:
            return None

    def all(self, count: int, timeout: float) -> dict[TaskKey, int]:
        """The exits of ``count`` tasks, as many as come within ``timeout`` seconds."""
        found: dict[TaskKey, int] = {}
        deadline = time.monotonic() + timeout
        while len(found) < count:
            try:
                key, code = self.exits.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            found[key] = code
        return found


class Jobs:
    """Jobs of container tasks (one, by default), every one in a folder of its own."""

    def __init__(self, root: Path, backend: LocalBackend) -> None:
        self.root, self.backend, self.image = root, backend, base_image()
        self.data_dir = DataDir(root / "data")
        self.count = 0

    def job(self, command: str = CATCH_TERM, replicas: int = 1) -> JobLaunch:
        self.count += 1
        worker = {"command": ["sh", "-c", command], "image": self.image, "replicas": replicas}
        spec = JobSpec.model_validate(
            {"name": "stops", "grace_period": 5, "roles": {"worker": worker}}
        )
        job_id = f"stops-{os.getpid()}-{self.count}"
        addresses = self.backend.reserve(job_id, spec)
        slots = tuple(TaskSlot(*key, *addresses[key], ()) for key in task_keys(spec))
        workdir = self.root / f"work-{self.count}"
        workdir.mkdir()
        attempts = dict.fromkeys(task_keys(spec), 0)
        return JobLaunch(job_id, spec, Placement(slots), workdir, self.data_dir, attempts)

    def start(self, job: JobLaunch, reports: Reports) -> dict[TaskKey, TaskHandle]:
        started = self.backend.start(job, reports)
        failed = [why for why in started.values() if isinstance(why, NotStarted)]
        assert not failed, failed
        return {key: TaskHandle(handle) for key, handle in started.items()}


def container_name(job: JobLaunch, key: TaskKey = WORKER) -> str:
    return f"trainfleet-{job.job_id}-{key[0]}-{key[1]}-{job.attempts[key]}"


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def monitor_seen(name: str) -> bool:
    """Whether a process names the container (its monitor: the container is being made)."""
    needle = name.encode()
    return any(
        needle in _cmdline(entry.name) and b"conmon" in _cmdline(entry.name)
        for entry in os.scandir("/proc")
        if entry.name.isdigit()
    )


def leftovers(job: JobLaunch) -> list[str]:
    """What is left of the job's containers and tasks: each container, and every process
    that names one, runs in the job's folder or carries an attempt's mark."""
    found = []
    for key, attempt in job.attempts.items():
        record = job.data_dir.record(job.job_id, *key, attempt)
        found += left_of(container_name(job, key), job.workdir, record)
    return list(dict.fromkeys(found))


def left_of(name: str, workdir: Path, record: Path) -> list[str]:
    listed = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"name=^{name}$", "--format", "{{.Status}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    found = [f"container {name}: {listed}"] if listed else []
    mark = f"\0TRAINFLEET_ATTEMPT={record}\0".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        command = _cmdline(entry.name)
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                environ = b"\0" + handle.read() + b"\0"
        except OSError:  # gone, or a zombie: not running
            continue
        shown = command.replace(b"\0", b" ")[:100].decode(errors="replace")
        if name.encode() in command or cwd == str(workdir) or mark in environ:
            found.append(f"pid {entry.name} ({shown}, in {cwd})")
    return found


def _stop_at(rng: random.Random, name: str, creating: float = 0.5, spread: float = 0.1) -> str:
    """Wait for a random moment of the container's start: a time after the task's start,
    or (with the odds ``creating``) up to ``spread`` seconds after its monitor appeared,
    while the container is being created (about 0.1 s here, before it runs); what it was."""
    if rng.random() >= creating:
        delay = rng.uniform(0.0, 1.5)
        time.sleep(delay)
        return f"{delay:.3f} s after the start"
    delay = rng.uniform(0.0, spread)
    deadline = time.monotonic() + EXIT_SECONDS
    while not monitor_seen(name):
        assert time.monotonic() < deadline, f"{name}: no monitor in {EXIT_SECONDS} s"
        time.sleep(0.002)
    time.sleep(delay)
    return f"{delay:.3f} s after its monitor appeared"


def test_no_container_outlives_a_task_stopped_at_any_moment_of_its_start(
    tmp_path: Path,
) -> None:
    """Jobs of three container tasks (that exit 7 on SIGTERM) stopped, gracefully or forced
    through the backend's ``stop``, at random moments of ``podman run``: each one's exit is
    reported (never 0: none ran to its end), a graceful stop ends them by itself, and
    nothing of them is left once their exits are reported."""
    seed = _seed()
    rng = random.Random(seed)
    backend = LocalBackend(supervised=True)
    jobs = Jobs(tmp_path, backend)
    failures = []
    for round_ in range(ROUNDS):
        job = jobs.job(replicas=REPLICAS)
        force = rng.random() < 0.5
        reports = Reports()
        handles = jobs.start(job, reports)
        when = _stop_at(rng, container_name(job, ("worker", rng.randrange(REPLICAS))))
        for handle in handles.values():
            backend.stop(handle, force=force)
        said = f"round {round_}: stopped {'forced' if force else 'gracefully'} {when}"
        codes = reports.all(REPLICAS, EXIT_SECONDS if force else GRACEFUL_SECONDS)
        if len(codes) < REPLICAS and not force:
            failures.append(f"{said}: {REPLICAS - len(codes)} ran on: {leftovers(job)}")
            for handle in handles.values():
                backend.stop(handle, force=True)
            codes |= reports.all(REPLICAS - len(codes), EXIT_SECONDS)
        if len(codes) < REPLICAS:
            failures.append(f"{said}: exits reported: {codes}")
        elif left := leftovers(job):
            failures.append(f"{said}, exits {codes}: left {left}")
        elif 0 in codes.values():
            failures.append(f"{said}: exits {codes}, 0 as if it had done its work")
        backend.release(job.job_id)
    assert not failures, f"seed {seed} (TRAINFLEET_TEST_SEED): " + "; ".join(failures)


def test_a_graceful_stop_reports_the_task_s_own_exit_and_no_success_it_never_had(
    tmp_path: Path,
) -> None:
    """Containers whose program says so and exits 0 on SIGTERM, stopped gracefully at
    random moments of their start: a task that got the stop reports its own 0 (a clean
    shutdown is no failure), and one stopped before its program ran (podman's client ends
    with 0 then) reports the stop's signal, never 0."""
    seed = _seed()
    rng = random.Random(seed)
    backend = LocalBackend(supervised=True)
    jobs = Jobs(tmp_path, backend)
    failures = []
    for round_ in range(6):
        job = jobs.job("trap 'echo stopped; exit 0' TERM; while :; do sleep 0.1; done")
        reports = Reports()
        handles = jobs.start(job, reports)
        when = _stop_at(rng, container_name(job))
        backend.stop(handles[WORKER], force=False)
        code = reports.next(GRACEFUL_SECONDS)
        log = job.task(WORKER).log_path
        stopped = log.exists() and "stopped" in log.read_text()
        said = f"round {round_}: stopped {when}, exit {code}, the program said so: {stopped}"
        if code is None or (code == 0) != stopped:
            failures.append(said)
        elif left := leftovers(job):
            failures.append(f"{said}: left {left}")
        backend.release(job.job_id)
    assert not failures, f"seed {seed} (TRAINFLEET_TEST_SEED): " + "; ".join(failures)


def _wait_gone(pid: int) -> None:
    """Until ``pid`` runs no more (a zombie, or gone)."""
    wait_for(lambda: not _cmdline(str(pid)), timeout=EXIT_SECONDS, what=f"pid {pid} to end")


def _start_alone(jobs: Jobs, job: JobLaunch) -> int:
    """Start the job's task from another process (its backend, supervised, exits at once),
    so that no backend here follows it; the pid of its shim."""
    program = (
        "import sys, pickle\n"
        "from trainfleet.backends.local import LocalBackend\n"
        "job = pickle.load(sys.stdin.buffer)\n"
        "started = LocalBackend(supervised=True).start(job, type('R', (), {\n"
        "    'exited': lambda *a: None, 'placed': lambda *a: None})())\n"
        "print(*started.values())\n"
    )
    import pickle

    done = subprocess.run(
        [sys.executable, "-c", program],
        input=pickle.dumps(job),
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return int(done.stdout.split()[-1])


@pytest.mark.parametrize("verb", ["adopt", "abandon"])
def test_a_lost_task_s_container_is_removed_by_adopt_and_abandon(tmp_path: Path, verb: str) -> None:
    """A task whose backend is gone (a server that died) and whose shim and runtime client
    are killed while its container is being created (kill -9 of the task's group): a new
    backend that adopts it (the shim is dead) or abandons it leaves nothing of it."""
    seed = _seed()
    rng = random.Random(seed)
    jobs = Jobs(tmp_path, LocalBackend(supervised=True))
    failures = []
    for round_ in range(3):
        job = jobs.job()
        shim = _start_alone(jobs, job)
        when = _stop_at(rng, container_name(job), creating=1.0)
        if verb == "adopt" or rng.random() < 0.5:
            os.killpg(shim, signal.SIGKILL)  # abandon: the shim dead, or still running
            _wait_gone(shim)
            when += " (task's group killed)"
        later, reports = LocalBackend(supervised=True), Reports()
        if verb == "adopt":
            assert later.adopt(job.data_dir, job.job_id, WORKER, 0, reports) is None
            code = reports.next()
        else:
            later.abandon(job.data_dir, job.job_id, WORKER)
            code = records.exit_status(job.data_dir.record(job.job_id, *WORKER, 0))
        said = f"round {round_}: {verb} {when}, exit {code}"
        if verb == "adopt" and code is None:
            failures.append(f"{said}: no exit reported")
        elif left := leftovers(job):
            failures.append(f"{said}: left {left}")
        jobs.backend.release(job.job_id)
    assert not failures, f"seed {seed} (TRAINFLEET_TEST_SEED): " + "; ".join(failures)


def test_the_slurm_bootstrap_removes_its_task_s_container(tmp_path: Path) -> None:
    """The bootstrap (run here as Slurm runs it on a node, without Slurm) told to KILL its
    task (a forced stop, an abandon) while the container is being created: it records the
    exit, and nothing of the container is left."""
    seed = _seed()
    rng = random.Random(seed)
    jobs = Jobs(tmp_path, LocalBackend(supervised=True))
    containers = Containers()
    failures = []
    for round_ in range(3):
        job = jobs.job()
        launch = job.task(WORKER)
        name = container_name(job)
        argv = containers.argv(launch, name)
        launch.record.parent.mkdir(parents=True, exist_ok=True)
        program = (
            "import sys, marshal\n"
            f"sys.path.insert(0, {str(Path(bootstrap.__file__).parent)!r})\n"
            "import bootstrap\n"
            "argv, env, record, name, shim = marshal.loads(sys.stdin.buffer.read())\n"
            "shim = bootstrap._load_shim(shim)\n"
            "sys.exit(bootstrap._supervise(shim, record, argv, env, container=name))\n"
        )
        arguments = (argv, dict(launch.env), str(launch.record), name, str(SHIM))
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", program],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            cwd=launch.cwd,
            start_new_session=True,
        )
        assert process.stdin is not None
        with process.stdin:
            process.stdin.write(marshal.dumps(arguments))
        when = _stop_at(rng, name, creating=1.0, spread=0.0)  # it looks every 0.1 s
        launch.record.with_name(launch.record.name + ".signal").write_text("KILL\n")
        began = time.monotonic()
        try:
            ended = f"the bootstrap ended ({process.wait(timeout=EXIT_SECONDS)})"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            ended = "the bootstrap ran on"
        ended += f" after {time.monotonic() - began:.1f} s"
        code = records.exit_status(launch.record)
        said = f"round {round_}: KILL {when}, exit {code}, {ended}"
        if code is None:
            failures.append(f"{said}: no exit recorded")
        elif left := leftovers(job):
            failures.append(f"{said}: left {left}")
        jobs.backend.release(job.job_id)
    assert not failures, f"seed {seed} (TRAINFLEET_TEST_SEED): " + "; ".join(failures)


def test_a_container_ends_with_the_trainfleet_run_that_started_it(tmp_path: Path) -> None:
    """``trainfleet run`` killed (kill -9) while its task's container is being created: the
    task's shim, tethered to it, ends the task and removes the container."""
    seed = _seed()
    rng = random.Random(seed)
    image = base_image()
    failures = []
    for round_ in range(3):
        folder = tmp_path / f"run-{round_}"
        folder.mkdir()
        (folder / "job.yaml").write_text(
            f"name: tethered\nimage: {image}\ngrace_period: 5\n"
            f"roles:\n  worker: {{command: [sh, -c, {CATCH_TERM!r}]}}\n"
        )
        data = folder / "data"
        runner = subprocess.Popen(
            trainfleet("run", folder / "job.yaml"),
            env={**os.environ, "TRAINFLEET_DATA_DIR": str(data)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + EXIT_SECONDS
        while not (found := list(data.glob("jobs/*/run/worker-0-0.pid"))):
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.01)
        record = found[0].with_suffix("")
        name = f"trainfleet-{record.parent.parent.name}-worker-0-0"
        when = _stop_at(rng, name, creating=1.0, spread=0.03)
        runner.kill()
        runner.wait()
        _wait_gone(int(found[0].read_text()))
        code = records.exit_status(record)
        said = f"round {round_}: trainfleet run killed {when}, exit {code}"
        if code is None:
            failures.append(f"{said}: no exit recorded")
        elif left := left_of(name, folder, record):
            failures.append(f"{said}: left {left}")
    assert not failures, f"seed {seed} (TRAINFLEET_TEST_SEED): " + "; ".join(failures)


def test_a_removal_that_fails_says_why_and_gives_up(tmp_path: Path) -> None:
    """A fake runtime (a shell script: the failures of a real one cannot be had at will):
    one that refuses is tried again until the time is up, and its last word is the problem;
    docker's word for a container that is not there is no problem."""
    from trainfleet.backends.supervision.shim import Container

    runtime = tmp_path / "docker"
    runtime.write_text(
        "#!/bin/sh\necho \"$*\" >> $0.calls\necho 'Error: storage is locked' >&2\nexit 1\n"
    )
    runtime.chmod(0o755)
    problem = Container(str(runtime), "trainfleet-x").remove(timeout=0.5)
    assert problem == "could not remove the container trainfleet-x: Error: storage is locked"
    calls = (tmp_path / "docker.calls").read_text().splitlines()
    assert len(calls) >= 2 and set(calls) == {"rm --force trainfleet-x"}, calls
    runtime.write_text("#!/bin/sh\necho 'Error: No such container: trainfleet-x' >&2\nexit 1\n")
    assert Container(str(runtime), "trainfleet-x").remove(timeout=0.5) is None
    runtime.write_text("#!/bin/sh\necho trainfleet-x\n")
    assert Container(str(runtime), "trainfleet-x").remove(timeout=0.5) is None
    missing = Container(str(tmp_path / "nowhere"), "trainfleet-x").remove()
    assert missing is not None and "nowhere" in missing


def test_a_monitor_left_with_its_container_has_it_deleted_by_the_oci_runtime(
    tmp_path: Path,
) -> None:
    """A monitor whose container podman no longer knows (its client killed between the OCI
    runtime's create and podman's record of it) outlives the removal: after a second, the
    OCI runtime it names deletes the container, with the options conmon gives it but its
    log's, and the monitor ends. A stand-in monitor (python named ``conmon``, with conmon's
    options) and runtime (a script that ends the monitor): the real race comes at random
    only, and the tests above meet it now and then."""
    from trainfleet.backends.supervision.shim import end_monitors, monitors

    name = f"trainfleet-test-monitor-{os.getpid()}"
    pid_file, calls = tmp_path / "monitor.pid", tmp_path / "calls"
    runtime = tmp_path / "runc"
    runtime.write_text(f'#!/bin/sh\necho "$@" > {calls}\nkill $(cat {pid_file})\n')
    runtime.chmod(0o755)
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    argv = ["conmon", "-c", code, "--full-attach", "-r", str(runtime), "-n", name]
    argv += ["--runtime-arg", "--root", "--runtime-arg", "/run/elsewhere"]
    argv += ["--runtime-arg", "--log-format=json", "--runtime-arg", "--log"]
    argv += ["--runtime-arg=/gone/oci-log", "--exit-command", "/usr/bin/podman"]
    monitor = subprocess.Popen(argv, executable=sys.executable)
    try:
        wait_for(pid_file.exists, timeout=10, what="the stand-in monitor")
        assert [pid for pid, _, _ in monitors(name)] == [monitor.pid]
        started = time.monotonic()
        assert end_monitors(name, timeout=10)
        assert time.monotonic() - started < 5
        assert calls.read_text() == f"--root /run/elsewhere delete --force {code}\n"
        assert monitor.wait(timeout=5) == -signal.SIGTERM
    finally:
        monitor.kill()
        monitor.wait()
