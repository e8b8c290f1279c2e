"""The Slurm backend: each start of a job's tasks is one Slurm submission.

The tasks' logs and records live in the data directory, which every node must see at
the same path (a shared file system, as Slurm clusters have). A watcher thread reads the
records the tasks write (where they landed, how they exited) and what ``squeue`` says of
their jobs, and reports to the controllers.
"""

from __future__ import annotations

import contextlib
import marshal
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from trainfleet.backends.api import (
    BackendError,
    NotStarted,
    Outside,
    Preview,
    TaskHandle,
    TaskReports,
    TaskStatus,
)
from trainfleet.backends.launch import JobLaunch
from trainfleet.backends.slurm import commands
from trainfleet.backends.slurm.commands import Shards, SlurmError, SlurmJob, SlurmUnreachable
from trainfleet.backends.slurm.pyxis import pyxis_argv
from trainfleet.backends.slurm.script import (
    NotForSlurm,
    Shape,
    batch_script,
    components,
    task_shape,
)
from trainfleet.backends.supervision import SHIM
from trainfleet.backends.supervision.containers import Containers
from trainfleet.backends.supervision.ports import PooledAddresses
from trainfleet.backends.supervision.usage_options import USAGE_INTERVAL, nvml_file
from trainfleet.datadir import records
from trainfleet.datadir.layout import DataDir
from trainfleet.datadir.usage import usage_path
from trainfleet.domain.conditions import Code
from trainfleet.scheduling.cluster import Node
from trainfleet.scheduling.placement import Placement, TaskKey, Unschedulable, task_keys
from trainfleet.scheduling.resources import GPU_UNIT, Resources
from trainfleet.spec.backends import SlurmConfig
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.models import JobSpec

BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
MIB = 1024**2
SQUEUE_SECONDS = 2.0
"""How often ``squeue`` is asked while the tasks' records say nothing needing it (each call
is a process and a request to slurmctld: asked every poll, they slowed the cluster down)."""
SHARDS_ASK_SECONDS = 5.0
"""How long a check or a dry run waits for Slurm to say how many shards a GPU has (sinfo
retries for a minute where its slurm.conf is missing); the submission itself waits longer."""
SHARDS_KEPT_SECONDS = 30.0
"""How long that answer (or its absence) holds for the next check or dry run."""
GONE_GRACE_SECONDS = 3.0
SETTLE_SECONDS = 10.0
"""How long a task that failed waits for its Slurm job to leave COMPLETING, so that the
job's verdict (cancelled, node failure) goes with the task's exit."""
"""How long a task may lack its exit record after Slurm says its step or job ended (the
record may be on its way through a shared file system)."""


def _slurm_job(record: Path) -> str | None:
    """The Slurm job an attempt was handed to (its ``.slurm`` record), if it was."""
    try:
        return record.with_name(record.name + ".slurm").read_text().strip() or None
    except OSError:
        return None


def _warned(launch_file: Path) -> Path:
    """The file the batch shell of a start creates when Slurm warns it (see batch_script)."""
    return launch_file.with_suffix(".warned")


def _stopped_by_slurm(record: Path) -> str | None:
    """Why Slurm sent the attempt SIGTERM, as its bootstrap learnt it (``.stopped``:
    ``preempted``, ``time-limit``, ``cancelled``), where Slurm did."""
    try:
        return record.with_name(record.name + ".stopped").read_text().strip() or None
    except OSError:
        return None


def _request_signal(record: Path, name: str) -> None:
    """Ask the bootstrap of the attempt ``record`` to send its task SIG``name``."""
    request = record.with_name(record.name + ".signal")
    temporary = request.with_name(request.name + ".tmp")
    temporary.write_text(name)
    temporary.replace(request)


def host_token(position: int) -> str:
    """The placeholder for the host of the task at ``position``, until it is known."""
    return f"trainfleet-host-{position}.invalid"


def _on_hosts(placement: Placement, hosts: Mapping[TaskKey, str]) -> Placement:
    """``placement`` with each task on the host ``hosts`` names, and no GPUs of this machine's
    (Slurm gives each step its own)."""
    return Placement(tuple(replace(slot, host=hosts[slot.key], gpus=()) for slot in placement))


@dataclass
class _Task:
    """A task handed to Slurm, until its exit has been reported."""

    key: TaskKey
    record: Path
    job: str
    port: int
    reports: TaskReports
    step: str | None = None
    step_host: str = ""
    note: str = ""
    gone_since: float | None = None
    failed_since: float | None = None


class SlurmBackend(PooledAddresses):
    """Runs each start of a job's tasks as one Slurm batch job, one step per component.

    A task's handle is ``<Slurm job>:<role>/<index>``; its attempt's ``.slurm`` record
    names the Slurm job, which is how a restarted trainfleet finds it again.
    """

    restarts_whole_jobs = True
    queues_tasks = True

    def __init__(
        self,
        config: SlurmConfig,
        container_runtime: str | None = None,
        usage_interval: float = USAGE_INTERVAL,
    ) -> None:
        self.config = config
        self.usage_interval = usage_interval
        """Seconds between two samples of a task's resource use by its bootstrap (0: none)."""
        # Each node's runtime pulls what it lacks.
        self.containers = Containers(container_runtime, pulls_here=False)
        self._tasks: dict[TaskHandle, _Task] = {}
        self._cancelled: set[str] = set()
        """Slurm jobs this backend cancelled (any other cancel came from outside)."""
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._asked = 0.0
        """When ``squeue`` was last asked (monotonic seconds)."""
        self._shards: tuple[float, str | None, Shards | None] | None = None
        """When, for which partition, and what Slurm said of its GPU shards."""

    def gpu_memory(self) -> int | None:
        return None  # Slurm hands out GPUs (and shards), not trainfleet

    def nodes(self) -> list[Node]:
        """The nodes of the configured partition (the default one where none is)."""
        found = commands.nodes(self.config.partition)
        if not found:
            problem = (
                f"slurm.partition: Slurm has no partition {self.config.partition!r}"
                if self.config.partition
                else "slurm.partition is not set and Slurm has no default partition"
            )
            raise BackendError(f"{problem} (partitions: {', '.join(commands.partitions())})")
        return [
            Node(name, Resources(cpu=cpus * 1000, memory=memory * MIB, gpu=gpus * GPU_UNIT))
            for name, cpus, memory, gpus in found
        ]

    def check(self, spec: JobSpec) -> None:
        if spec.framework is Framework.MPI:
            raise Unschedulable(
                "framework: mpi runs on the local backend only for now (its mpirun starts "
                "every rank on the launcher's machine); on Slurm, run the program as a "
                "generic job with `srun --mpi=pmix`"
            )
        if spec.secret_refs():
            field, _ = spec.secret_refs()[0]
            raise Unschedulable(
                f"{field}: secrets reach tasks on the local backend only for now (a Slurm "
                "job's launch file would hold their values on the shared file system)"
            )
        if spec.notebook is not None:
            raise Unschedulable(
                "notebook: notebooks run on the local backend only for now (a server proxies "
                "a notebook on its own machine, and its Jupyter token would be in the Slurm "
                "job's launch file)"
            )
        shards = self._gpu_shards(spec, asked_anyway=False)
        try:
            per_gpu = shards.per_gpu if shards else None
            shapes = {role: task_shape(spec, role, self.config, per_gpu) for role in spec.roles}
        except NotForSlurm as error:
            raise Unschedulable(str(error)) from None
        self._check_components(spec, per_gpu)
        wanted = sum(
            (shape.shards or 0) * spec.roles[role].replicas for role, shape in shapes.items()
        )
        if shards is not None and wanted > shards.total:
            raise Unschedulable(
                f"resources.gpu: the job's fractions of a GPU make {wanted} GPU shards "
                f"({shards.per_gpu} to a GPU, each task's rounded up), and partition "
                f"{self._partition} has {shards.total}: it could never run"
            )

    @property
    def _partition(self) -> str:
        return self.config.partition or "the default"

    def _check_components(self, spec: JobSpec, per_gpu: int | None) -> None:
        """Unschedulable where the job has more components (shapes of task, each fraction of
        a GPU its own) than the partition has nodes: Slurm's backfill scheduler starts a
        heterogeneous job only where it could give each component a node of its own."""
        count = len(components(spec, task_keys(spec), self.config, per_gpu))
        if count == 1:
            return
        try:
            nodes = len(commands.nodes(self.config.partition))
        except SlurmError:
            return  # the submission will say what is wrong with Slurm
        if count > nodes:
            raise Unschedulable(
                f"roles: the job is {count} Slurm components (one per shape of task, and one "
                f"per task with a fraction of a GPU), and partition {self._partition} has {nodes} "
                "node(s): Slurm starts a heterogeneous job only where each component could "
                "have a node of its own, so it would wait for ever; give tasks the same "
                "resources, or fewer tasks a fraction of a GPU"
            )

    def _gpu_shards(self, spec: JobSpec, asked_anyway: bool = True) -> Shards | None:
        """The partition's GPU shards, where a role asks for a fraction of a GPU (None where
        none does). Unless ``asked_anyway`` (a submission), Slurm is given
        ``SHARDS_ASK_SECONDS`` and its answer is kept a while; None where it does not
        answer: the submission will say why."""
        if not any(0 < role.resources.gpu < 1 for role in spec.roles.values()):
            return None
        partition = self.config.partition
        if asked_anyway:
            return commands.gpu_shards(partition)
        now = time.monotonic()
        kept = self._shards
        if kept and kept[1] == partition and now - kept[0] < SHARDS_KEPT_SECONDS:
            return kept[2]
        try:
            found: Shards | None = commands.gpu_shards(partition, SHARDS_ASK_SECONDS)
        except SlurmError:
            found = None
        self._shards = (now, partition, found)
        return found

    def start(self, job: JobLaunch, reports: TaskReports) -> dict[TaskKey, TaskHandle | NotStarted]:
        keys = list(job.attempts)
        try:
            slurm_job = self._submit(job)
        except SlurmUnreachable as error:  # sbatch sent nothing: the same start again later
            return {key: NotStarted(str(error), retry=True) for key in keys}
        except (SlurmError, NotForSlurm, OSError) as error:
            return {key: NotStarted(str(error)) for key in keys}
        started: dict[TaskKey, TaskHandle | NotStarted] = {}
        for key in keys:
            record = job.data_dir.record(job.job_id, *key, job.attempts[key])
            record.with_name(record.name + ".slurm").write_text(slurm_job)
            port = job.placement.slot(*key).port
            started[key] = self._follow(_Task(key, record, slurm_job, port, reports))
        return started

    def _follow(self, task: _Task) -> TaskHandle:
        handle = TaskHandle(f"{task.job}:{task.key[0]}/{task.key[1]}")
        with self._lock:
            self._tasks[handle] = task
        self._watch()
        return handle

    def dryrun(self, job: JobLaunch) -> Preview:
        """The tasks with their hosts and GPUs still to be learnt, and the batch script."""
        hosts = {slot.key: f"<node of {slot.key[0]}/{slot.key[1]}>" for slot in job.placement}
        launches = []
        for key in job.attempts:
            launch = job.task(key, _on_hosts(job.placement, hosts))
            if job.spec.roles[key[0]].resources.gpu:
                gpus = dict.fromkeys(("CUDA_VISIBLE_DEVICES", "TRAINFLEET_GPUS"), "<from Slurm>")
                launch = replace(launch, env={**launch.env, **gpus})
            launches.append(launch)
        shards = self._gpu_shards(job.spec, asked_anyway=False)  # else shown as such
        per_gpu = shards.per_gpu if shards else None
        groups = components(job.spec, list(job.attempts), self.config, per_gpu)
        launch_file = job.data_dir.run_dir(job.job_id) / "start-<time>.launch"
        return Preview(launches, self._script(job, groups, launch_file))

    def _script(
        self, job: JobLaunch, groups: list[tuple[Shape, list[TaskKey]]], launch_file: Path
    ) -> str:
        return batch_script(
            f"trainfleet-{job.job_id}",
            groups,
            self.config,
            launch_file.parent / "slurm-%j.out",
            [sys.executable, "-I", "-S", str(BOOTSTRAP), str(launch_file)],
            job.team,
            warn_before=job.spec.grace_period,
            warned=_warned(launch_file),
        )

    def _submit(self, job: JobLaunch) -> str:
        """Write the launch file and the batch script, and hand them to sbatch."""
        run = job.data_dir.run_dir(job.job_id)
        run.mkdir(parents=True, exist_ok=True)
        name = f"start-{time.time_ns()}"
        tokens = {slot.key: host_token(n) for n, slot in enumerate(job.placement)}
        placeholders = _on_hosts(job.placement, tokens)
        tasks = {}
        for key in job.attempts:
            launch = job.task(key, placeholders)
            argv, container = list(launch.argv), None
            if launch.image is not None and self.config.containers == "pyxis":
                argv = pyxis_argv(launch, node=tokens[key])  # the bootstrap puts the node in
            elif launch.image is not None:  # run by the node's runtime, under the task's shim
                container = f"trainfleet-{job.job_id}-{launch.record.name}"
                gpus = job.spec.roles[key[0]].resources.gpu > 0
                argv = self.containers.argv(launch, container, gpus_from_slurm=gpus)
            tasks[f"{key[0]}/{key[1]}"] = {
                "argv": argv,
                "env": dict(launch.env),
                "cwd": str(launch.host_cwd or launch.cwd),
                "log": str(launch.log_path),
                "record": str(launch.record),
                "gpus": job.spec.roles[key[0]].resources.gpu,  # a fraction too (shards)
                "token": tokens[key],
                "usage": str(usage_path(launch.log_path)),
                "usage_every": self.usage_interval,
                "container": container,  # removed by its bootstrap once its runtime ends
            }
        shards = self._gpu_shards(job.spec)
        per_gpu = shards.per_gpu if shards else None
        groups = components(job.spec, list(job.attempts), self.config, per_gpu)
        launch_file = run / f"{name}.launch"
        launch_file.write_bytes(
            marshal.dumps(
                {
                    "tasks": tasks,
                    "peers": self._peers(job, tokens),
                    "shim": str(SHIM),
                    "nvml": nvml_file(),
                    "groups": [[f"{role}/{index}" for role, index in keys] for _, keys in groups],
                    "rendezvous_timeout": self.config.rendezvous_timeout,
                    # How long before the time limit Slurm warns, and how (see batch_script).
                    "time_warning": job.spec.grace_period if self.config.time_limit else 0.0,
                    "warned": str(_warned(launch_file)),
                }
            )
        )
        script = run / f"{name}.sh"
        script.write_text(self._script(job, groups, launch_file))
        try:
            return commands.sbatch(script)
        except SlurmError:  # no job will read them (they hold the tasks' variables)
            launch_file.unlink(missing_ok=True)
            script.unlink(missing_ok=True)
            raise

    def _peers(self, job: JobLaunch, tokens: Mapping[TaskKey, str]) -> dict[str, dict[str, str]]:
        """Each running task this start joins but does not start (it starts a task restarted
        alone): its host's token and its attempt's record, where its bootstrap wrote it."""
        peers = {}
        for key, token in tokens.items():
            attempt = (
                None if key in job.attempts else self.last_attempt(job.data_dir, job.job_id, key)
            )
            if attempt is not None:
                record = job.data_dir.record(job.job_id, *key, attempt)
                peers[f"{key[0]}/{key[1]}"] = {"token": token, "record": str(record)}
        return peers

    def log_path(self, data_dir: DataDir, job_id: str, key: TaskKey) -> Path:
        return data_dir.log_path(job_id, *key)  # on the shared data directory

    def last_attempt(self, data_dir: DataDir, job_id: str, key: TaskKey) -> int | None:
        # .pid: an attempt an earlier (local) backend of this data directory started.
        suffixes = (".pid", ".slurm")
        return records.last_attempt(data_dir.run_dir(job_id), *key, suffixes=suffixes)

    def adopt(
        self, data_dir: DataDir, job_id: str, key: TaskKey, attempt: int, reports: TaskReports
    ) -> TaskHandle | None:
        record = data_dir.record(job_id, *key, attempt)
        status = records.exit_status(record)
        slurm_job = _slurm_job(record)
        if slurm_job is None or status is not None:  # ended, or not Slurm's to follow
            reports.exited(key, -signal.SIGKILL if status is None else status)
            return None
        return self._follow(_Task(key, record, slurm_job, 0, reports))

    def abandon(self, data_dir: DataDir, job_id: str, key: TaskKey) -> None:
        attempt = self.last_attempt(data_dir, job_id, key)
        slurm_job = None if attempt is None else _slurm_job(data_dir.record(job_id, *key, attempt))
        if slurm_job is not None:
            assert attempt is not None
            # Its bootstrap kills it (a container's processes too), then Slurm the rest.
            _request_signal(data_dir.record(job_id, *key, attempt), "KILL")
            self._cancelled.add(slurm_job)
            with contextlib.suppress(SlurmError):  # it has ended already
                commands.scancel(slurm_job)

    def describe(self, handle: TaskHandle) -> TaskStatus:
        with self._lock:
            task = self._tasks.get(handle)
        job = task.job if task else handle.partition(":")[0]
        step = f", step {task.step}" if task and task.step else ""
        return TaskStatus(handle, f"Slurm job {job}{step}")

    def stop(self, handle: TaskHandle, force: bool = False) -> None:
        """Ask the task's bootstrap to signal it; a task not running yet is cancelled with
        its whole Slurm job."""
        with self._lock:
            task = self._tasks.get(handle)
        if task is None:
            return
        if self._read_step(task):
            _request_signal(task.record, "KILL" if force else "TERM")
            return
        self._cancelled.add(task.job)
        with contextlib.suppress(SlurmError):  # it ended meanwhile: the watcher says how
            commands.scancel(task.job)

    # -- the watcher ----------------------------------------------------------

    def _watch(self) -> None:
        with self._lock:
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._loop, name="slurm", daemon=True)
                self._watcher.start()

    def _loop(self) -> None:
        while True:
            time.sleep(self.config.poll_interval)
            try:
                self._look()
            except SlurmError as error:
                print(f"trainfleet: slurm: {error}", file=sys.stderr)

    def _look(self) -> None:
        """One look at every task's records, and at what Slurm says of their jobs when a
        task failed (was it Slurm?) or ``SQUEUE_SECONDS`` have passed."""
        with self._lock:
            tasks = dict(self._tasks)
        if not tasks:
            return
        exits = {handle: records.exit_status(task.record) for handle, task in tasks.items()}
        # An attempt Slurm stopped (a preemption, its time limit) ended because of it, even
        # where its program saved its work and exited 0, which Slurm calls COMPLETED.
        stopped = {
            handle: _stopped_by_slurm(task.record)
            for handle, task in tasks.items()
            if exits[handle] is not None
        }
        for task in tasks.values():
            if task.step is None and self._read_step(task):
                host = task.step_host
                task.reports.placed(
                    task.key,
                    f"{host}:{task.port}" if task.port else "",
                    f"running on {host} (Slurm job {task.step})",
                )
        now = time.monotonic()
        failed = any(status not in (None, 0) for status in exits.values()) or any(stopped.values())
        if not failed and now - self._asked < SQUEUE_SECONDS:
            for handle, task in tasks.items():
                if exits[handle] == 0:
                    self._report(handle, task, 0, [], False)
            return
        self._asked = now
        slurm = commands.jobs({task.job for task in tasks.values()})
        running_steps = commands.steps(
            task.step for handle, task in tasks.items() if task.step and exits[handle] is None
        )
        for handle, task in tasks.items():
            components = slurm.get(task.job, [])
            ended = not components or all(part.ended for part in components)
            status = exits[handle]
            said = stopped.get(handle)
            if (status not in (None, 0) or said) and self._settling(task, components, now):
                self._asked = 0.0  # ask again at the next look
            elif status is not None:
                self._report(handle, task, status, components, ended, said)
            elif ended or (task.step is not None and task.step not in running_steps):
                task.gone_since = task.gone_since or now
                if now - task.gone_since >= GONE_GRACE_SECONDS:
                    self._report(handle, task, -signal.SIGKILL, components, True)
            elif components[0].state == "PENDING":
                reason = components[0].reason
                why = "before its first scheduling pass" if reason == "None" else reason
                note = f"pending in Slurm (job {task.job}): {why}"
                if note != task.note:
                    task.note = note
                    task.reports.placed(task.key, "", note)

    def _settling(self, task: _Task, components: list[SlurmJob], now: float) -> bool:
        """Whether Slurm is still ending the failed task's job (its verdict is to come)."""
        if not any(part.state == "COMPLETING" for part in components):
            return False
        task.failed_since = task.failed_since or now
        return now - task.failed_since < SETTLE_SECONDS

    def _report(
        self,
        handle: TaskHandle,
        task: _Task,
        status: int,
        components: list[SlurmJob],
        ended: bool,
        said: str | None = None,
    ) -> None:
        """Tell the task's exit; ``said``: why Slurm stopped it, as its bootstrap learnt."""
        with self._lock:
            del self._tasks[handle]
        outside = self._outside(task, components, said) if status != 0 or said else None
        if outside is None and status == -signal.SIGKILL and ended and not components:
            outside = Outside(f"Slurm job {task.job} is gone")
        task.reports.exited(task.key, status, outside)

    def _outside(
        self, task: _Task, components: list[SlurmJob], said: str | None = None
    ) -> Outside | None:
        """What Slurm did to the task's job, when it was Slurm that ended it: what its
        state says, else why its bootstrap was told it was signalled (``said``): a
        preempted or warned job whose program saved and ended in time is COMPLETED or
        FAILED to Slurm."""
        states = {part.state for part in components}
        nodes = ",".join(part.nodes for part in components if part.nodes)
        if "NODE_FAIL" in states:
            return Outside(f"{self._failed_nodes(nodes)} failed; Slurm job {task.job}: NODE_FAIL")
        cancelled = "CANCELLED" in states or said == "cancelled"
        if cancelled and task.job not in self._cancelled:
            return Outside(f"Slurm job {task.job} was cancelled outside trainfleet", True)
        if "PREEMPTED" in states or said == "preempted":
            return Outside(f"Slurm preempted job {task.job}", cause=Code.PREEMPTED)
        if "TIMEOUT" in states:
            return Outside(f"Slurm job {task.job} reached its time limit")
        if said == "time-limit":
            return Outside(f"Slurm job {task.job} was warned of its time limit")
        ended = states & (commands.ENDED_STATES - {"COMPLETED", "CANCELLED"})
        if ended and all(part.ended for part in components):
            return Outside(f"Slurm job {task.job} ended {', '.join(sorted(ended))}")
        return None

    @staticmethod
    def _failed_nodes(nodes: str) -> str:
        """``node tf-node3``: which of the job's nodes Slurm holds down, where it says."""
        try:
            down = commands.down_nodes(nodes) if nodes else []
        except SlurmError:
            down = []
        return f"node {', '.join(down)}" if down else f"a node of {nodes}"

    def _read_step(self, task: _Task) -> bool:
        """Learn the task's node and step from its ``.host`` record, once it has one."""
        if task.step is not None:
            return True
        try:
            host, step = task.record.with_name(task.record.name + ".host").read_text().split()
        except (OSError, ValueError):
            return False
        task.step, task.step_host = step, host
        return True
