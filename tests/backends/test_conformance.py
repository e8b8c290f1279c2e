"""One backend contract, every backend: the same checks run on the local backend and on a
real Slurm cluster (``scripts/slurm.sh``) and on a real Kubernetes (``scripts/k8s.sh``),
through the verbs of ``backends/api.py`` alone.

Every backend runs the same checks unchanged: start and exit codes, logs, describe, stop
with its grace, forced stop, adopt after a restart of trainfleet, abandon, addresses and
dry runs. The ``podman`` variants run
every task in a container of the test image (``scripts/images.sh``). The ``simulated``
backend runs no process: each command comes with the plan its simulated task follows
instead (``Program``), and a case that needs a real process is skipped for it.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from container_images import base_image
from helpers import wait_for
from kube_cluster import kubeconfig
from slurm_nodes import slurm_conf, wait_until_idle
from task_reports import EXIT_SECONDS, Reports

from trainfleet.backends.api import (
    Backend,
    NotStarted,
    TaskHandle,
    TaskStatus,
)
from trainfleet.backends.launch import JobLaunch
from trainfleet.backends.local import LocalBackend
from trainfleet.backends.simulated import SIM_VARIABLE, SimulatedBackend
from trainfleet.backends.supervision.ports import PORTS
from trainfleet.backends.supervision.shim import ATTEMPT_VARIABLE, marked_processes
from trainfleet.control.policies import exit_code
from trainfleet.datadir.layout import DataDir
from trainfleet.scheduling.placement import Placement, TaskKey, TaskSlot, task_keys
from trainfleet.spec.backends import KubernetesConfig, SlurmConfig
from trainfleet.spec.models import JobSpec

WORKER: TaskKey = ("worker", 0)


class Program(NamedTuple):
    """What a task runs (``sh -c shell``), and what a simulated task does in its place."""

    shell: str
    sim: dict[str, Any]


READY = "echo ready; "
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.1; done; "
TRUE = Program("true", {"runs": 0})
IGNORE_TERM = Program(
    "trap '' TERM; " + READY + "while :; do sleep 0.1; done",
    {"output": "ready\n", "on_term": "ignore"},
)
CATCH_TERM = Program(
    "trap 'echo stopping; exit 7' TERM; " + READY + "while :; do sleep 0.1; done",
    {"output": "ready\n", "on_term": 7, "term_output": "stopping\n"},
)


class Site:
    """One backend under test, with a data directory and a job folder of its own."""

    def __init__(self, make: Callable[[], Backend], root: Path, image: str | None = None) -> None:
        self.make = make
        self.image = image
        self.simulated = False
        self.backend = make()
        self.data_dir = DataDir(root / "data")
        self.workdir = root / "work"
        self.workdir.mkdir()
        self.jobs: list[str] = []

    def job(self, roles: dict[str, Program], attempt: int = 0) -> JobLaunch:
        """A job of one task per role running ``sh -c <shell>`` (simulated: following its
        plan), its addresses reserved."""
        spec = JobSpec.model_validate(
            {
                "name": "conformance",
                "grace_period": 8,  # kubelet 1.20 waits it out even when forced
                "roles": {
                    role: {
                        "command": ["sh", "-c", program.shell],
                        "image": self.image,
                        "env": {SIM_VARIABLE: json.dumps(program.sim)} if self.simulated else {},
                    }
                    for role, program in roles.items()
                },
            }
        )
        job_id = f"conformance-{secrets.token_hex(4)}"
        addresses = self.backend.reserve(job_id, spec)
        self.jobs.append(job_id)
        slots = tuple(TaskSlot(*key, *addresses[key], ()) for key in task_keys(spec))
        attempts = dict.fromkeys(task_keys(spec), attempt)
        return JobLaunch(job_id, spec, Placement(slots), self.workdir, self.data_dir, attempts)

    def start(self, job: JobLaunch, reports: Reports) -> dict[TaskKey, TaskHandle]:
        started = self.backend.start(job, reports)
        failed = {key: why for key, why in started.items() if isinstance(why, NotStarted)}
        assert not failed, failed
        return {key: TaskHandle(handle) for key, handle in started.items()}

    def log(self, job: JobLaunch, key: TaskKey = WORKER) -> str:
        path = self.backend.log_path(self.data_dir, job.job_id, key)
        return path.read_text() if path.exists() else ""

    def leftovers(self, job: JobLaunch, key: TaskKey = WORKER) -> list[int]:
        """Pids of the attempt's processes still running here (its container's too)."""
        record = job.data_dir.record(job.job_id, *key, job.attempts[key])
        return [pid for pid, _ in marked_processes(f"{ATTEMPT_VARIABLE}={record}")]

    def wait_ready(self, job: JobLaunch, key: TaskKey = WORKER) -> None:
        deadline = time.monotonic() + EXIT_SECONDS
        while "ready" not in self.log(job, key):
            assert time.monotonic() < deadline, f"{key} never became ready"
            time.sleep(0.1)


def _local() -> Backend:
    return LocalBackend(supervised=True)


@pytest.fixture(params=["local", "podman", "slurm", "slurm-podman", "kubernetes", "simulated"])
def site(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch) -> Iterator[Site]:
    image = base_image() if request.param.endswith("podman") else None
    if request.param == "kubernetes":  # every Pod runs in an image
        from trainfleet.backends.kubernetes.backend import KubernetesBackend

        config = KubernetesConfig(kubeconfig=kubeconfig(), host_paths=True)
        site = Site(lambda: KubernetesBackend(config), tmp_path, base_image())
    elif request.param.startswith("slurm"):
        monkeypatch.setenv("SLURM_CONF", slurm_conf())
        wait_until_idle(os.environ)
        from trainfleet.backends.slurm.backend import SlurmBackend

        config = SlurmConfig(poll_interval=0.2, memory_per_task="128Mi", rendezvous_timeout=60)
        site = Site(lambda: SlurmBackend(config), tmp_path, image)
    elif request.param == "simulated":
        site = Site(SimulatedBackend, tmp_path)
        site.simulated = True
    else:
        site = Site(_local, tmp_path, image)
    yield site
    for job_id in site.jobs:
        site.backend.release(job_id)


def test_exit_codes_logs_and_describe(site: Site) -> None:
    good = Program("echo hello; exit 0", {"output": "hello\n", "runs": 0})
    bad = Program("echo oops; exit 3", {"output": "oops\n", "runs": 0, "exit": 3})
    job = site.job({"good": good, "bad": bad})
    reports = Reports()
    handles = site.start(job, reports)
    statuses = {key: site.backend.describe(handle) for key, handle in handles.items()}
    assert reports.codes(2) == {("good", 0): 0, ("bad", 0): 3}
    assert site.log(job, ("good", 0)) == "hello\n"
    assert site.log(job, ("bad", 0)) == "oops\n"
    for key, status in statuses.items():
        assert isinstance(status, TaskStatus) and status.handle == handles[key]
        assert status.where, "describe says where the task runs"
        # A pid only where the task is a process of this machine that a signal reaches.
        assert (status.pid is not None) == (not site.backend.queues_tasks)
    assert len(set(handles.values())) == 2, "every task has a handle of its own"


def test_a_task_that_cannot_start_says_why(site: Site) -> None:
    job = site.job({"worker": TRUE})
    job.workdir.rmdir()  # its working directory is gone
    started = site.backend.start(job, Reports())
    if isinstance(started[WORKER], NotStarted):
        assert started[WORKER].reason
    else:  # a cluster engine learns it only where the task lands: the task fails there
        assert site.backend.queues_tasks


def test_stop_lets_a_task_end_in_its_own_way(site: Site) -> None:
    job = site.job({"worker": CATCH_TERM})
    reports = Reports()
    (handle,) = site.start(job, reports).values()
    site.wait_ready(job)
    site.backend.stop(handle)
    assert reports.codes() == {WORKER: 7}
    assert "stopping" in site.log(job)


def test_forced_stop_ends_a_task_that_ignores_sigterm(site: Site) -> None:
    job = site.job({"worker": IGNORE_TERM})
    reports = Reports()
    (handle,) = site.start(job, reports).values()
    site.wait_ready(job)
    site.backend.stop(handle)
    assert reports.none_yet(1.5), "a task that ignores SIGTERM runs on until forced"
    site.backend.stop(handle, force=True)
    assert exit_code(reports.codes()[WORKER]) == 137
    assert not site.leftovers(job), "nothing of the task runs once its exit is reported"


def test_a_restarted_trainfleet_adopts_a_running_task(site: Site) -> None:
    waits = {"output": "ready\n", "until_file": "go", "exit": 5}
    job = site.job({"worker": Program(READY + WAIT_FOR_GO + "exit 5", waits)}, attempt=2)
    site.start(job, Reports())
    site.wait_ready(job)
    later = site.make()  # a new trainfleet process: it knows only the data directory
    assert later.last_attempt(site.data_dir, job.job_id, WORKER) == 2
    reports = Reports()
    handle = later.adopt(site.data_dir, job.job_id, WORKER, 2, reports)
    assert handle is not None, "the task still runs"
    assert later.describe(handle).where
    assert reports.none_yet(0.5)
    (site.workdir / "go").touch()
    assert reports.codes() == {WORKER: 5}


def test_adopting_a_task_that_has_ended_reports_its_exit(site: Site) -> None:
    job = site.job({"worker": Program("exit 4", {"runs": 0, "exit": 4})})
    first = Reports()
    site.start(job, first)
    assert first.codes() == {WORKER: 4}
    later, reports = site.make(), Reports()
    assert later.adopt(site.data_dir, job.job_id, WORKER, 0, reports) is None
    assert reports.codes() == {WORKER: 4}


def test_a_task_never_started_has_no_attempt(site: Site) -> None:
    job = site.job({"worker": TRUE})
    assert site.backend.last_attempt(site.data_dir, job.job_id, WORKER) is None


def test_abandon_ends_what_is_left_of_a_lost_task(site: Site) -> None:
    job = site.job({"worker": IGNORE_TERM})
    reports = Reports()
    site.start(job, reports)
    site.wait_ready(job)
    site.make().abandon(site.data_dir, job.job_id, WORKER)  # its runner is gone
    assert reports.codes()[WORKER] != 0
    wait_for(lambda: not site.leftovers(job), timeout=30, what="the task's processes to end")


def test_addresses_are_held_until_released(site: Site) -> None:
    spec = JobSpec.model_validate(
        {
            "name": "ports",
            "roles": {
                "ps": {"command": "true", "port": 41000, "replicas": 2},
                "worker": {"command": "true", "replicas": 3},
            },
        }
    )
    addresses = site.backend.reserve("ports-a", spec)
    assert list(addresses) == task_keys(spec)
    assert addresses[("ps", 0)].port == 41000 and addresses[("ps", 1)].port == 41001
    ports = {address.port for address in addresses.values()}
    assert len(ports) == 5, "no two tasks share a port"
    hosts = {address.host for address in addresses.values()}
    assert hosts == {"" if site.backend.queues_tasks else "127.0.0.1"}
    assert ports <= PORTS.held()
    site.backend.release("ports-a")
    assert not ports & PORTS.held()
    site.backend.hold("ports-b", addresses)  # adopted after a restart: held again
    assert ports <= PORTS.held()
    site.backend.release("ports-b")


def test_dryrun_shows_each_launch_and_starts_nothing(site: Site) -> None:
    job = site.job({"worker": TRUE, "ps": TRUE})
    preview = site.backend.dryrun(job)
    assert [launch.key for launch in preview.tasks] == list(job.attempts)
    for launch in preview.tasks:
        assert launch.argv[-1] == "true"
        assert launch.cwd == site.workdir
        assert [mount.source for mount in launch.mounts] == [site.workdir]
        assert launch.image == site.image
        assert launch.env["TRAINFLEET_JOB"] == job.job_id
    assert (preview.submission is not None) == site.backend.queues_tasks
    assert not site.data_dir.root.exists(), "a dry run writes nothing"
