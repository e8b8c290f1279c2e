"""A task's launch as data (program, argv, env, workdir, mounts, resources, image), built
from a job's start (``JobLaunch.task``): a process, a container, a Slurm step or a pod are
ways to run the same launch."""

from __future__ import annotations

import functools
import io
import os
import re
import subprocess
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trainfleet.checkpoint as checkpoint
from trainfleet.backends.accounts import Account
from trainfleet.backends.supervision.shim import ATTEMPT_VARIABLE
from trainfleet.checkpoint import HEARTBEAT_VARIABLE, KEEP_VARIABLE, PATH_VARIABLE, latest
from trainfleet.datadir.files import fresh_dir, plain_folder, write_new
from trainfleet.datadir.layout import OUTPUT_VARIABLE, DataDir
from trainfleet.environments.task_base import SERVERS, TaskBase
from trainfleet.frameworks import task_argv, task_environment
from trainfleet.frameworks.base import TaskContext
from trainfleet.programs import (
    NOTEBOOK,
    RENDEZVOUS,
    RUN_FUNCTION,
    RUN_NOTEBOOK,
    TF_SERVER,
    WRITABLE_PROBE,
)
from trainfleet.scheduling.placement import Placement, TaskKey
from trainfleet.spec.checkpoints import RESTART_VARIABLE, RESUME_VARIABLE, STOP_VARIABLE
from trainfleet.spec.models import JobSpec, Resources, SecretRef
from trainfleet.spec.notebook import (
    API_TOKEN_VARIABLE,
    CA_VARIABLE,
    IDLE_VARIABLE,
    SERVER_VARIABLE,
    TOKEN_VARIABLE,
)
from trainfleet.spec.notebook import ROLE as NOTEBOOK_ROLE
from trainfleet.spec.rendezvous import HISTORY_VARIABLE
from trainfleet.spec.rendezvous import ROLE as RENDEZVOUS_ROLE
from trainfleet.spec.tensorboard import LOGDIR_VARIABLE
from trainfleet.vault.service_tokens import notebook_token

SHIM_INIT = b'''"""trainfleet as a job's task sees it: ``trainfleet.checkpoint``, and any
trainfleet its python has of its own, which comes first (written by trainfleet for the job)."""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
__path__.reverse()  # this folder last: a trainfleet the task has installed wins
'''


@functools.cache
def checkpoint_archive() -> bytes:
    """The zip archive of the package ``trainfleet`` that a job's tasks see: ``SHIM_INIT``
    and ``trainfleet.checkpoint`` (the same bytes for every job)."""
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as archive:
        for name, data in (
            ("__init__.py", SHIM_INIT),
            ("checkpoint.py", Path(checkpoint.__file__).read_bytes()),
        ):
            archive.writestr(zipfile.ZipInfo(f"trainfleet/{name}"), data)
    return packed.getvalue()


@dataclass(frozen=True)
class Mount:
    """A folder of this machine (or of the shared file system) that the task sees."""

    source: Path
    target: Path
    read_only: bool = False


@dataclass(frozen=True)
class ServerAccess:
    """How a notebook's task reaches the server that runs it, and as whom: ``Client()``'s
    variables (``spec.notebook.SERVER_VARIABLE``...)."""

    url: str
    token: str = field(default="", repr=False)
    """A token of the job's owner ("": none), masked in its log, never in a repr."""
    ca_cert: str | None = None
    """The CA certificate file that signed an HTTPS server's certificate (None: the
    usual CAs)."""

    def environment(self) -> dict[str, str]:
        """The task's variables.

        >>> ServerAccess("http://127.0.0.1:8080", "s3cret").environment()["TRAINFLEET_TOKEN"]
        's3cret'
        """
        env = {SERVER_VARIABLE: self.url}
        env |= {API_TOKEN_VARIABLE: self.token} if self.token else {}
        env |= {CA_VARIABLE: self.ca_cert} if self.ca_cert else {}
        return env


@dataclass(frozen=True)
class TaskLaunch:
    """One task's attempt as data: what runs, where, with what. A backend runs it as a
    process, a Slurm step, a container or a pod; none needs more than this."""

    key: TaskKey
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    """Its working directory, as it sees it (in a container: a path of the container's)."""
    log_path: Path
    record: Path
    """Prefix of this attempt's supervision records (``.pid``, ``.exit``)."""
    resources: Resources = field(default_factory=Resources)
    gpus: tuple[int, ...] = ()
    """Host indices of the GPUs given to it here; () where a cluster engine gives them."""
    mounts: tuple[Mount, ...] = ()
    """Folders it needs: its working directory, its Python environment. A process sees
    them anyway; a container must be given them."""
    image: str | None = None
    """The container image it runs in; None: this machine's (or node's) own file system."""
    pull: str = "if-missing"
    """When the image is pulled: ``if-missing``, ``always`` or ``never``."""
    image_workdir: bool = False
    """True: the container runs in its image's WORKDIR where the image declares one, not in
    ``cwd`` (as on Kubernetes)."""
    entrypoint: bool = False
    """True: the role gives no command, and ``argv`` are arguments to the image's own
    ENTRYPOINT (as Kubernetes runs a container with ``args`` alone)."""
    mask: tuple[bytes, ...] = field(default=(), repr=False)
    """Secret values its log shows as ``***`` (see ``supervision.masking``), never in a repr."""
    account: Account | None = None
    """The Unix account it runs as (its team's, see ``backends.accounts``); None: ours."""
    hostname: str = ""
    """Its own host name, where it has one (a container: ``task_hostname``)."""
    hosts: tuple[tuple[str, str], ...] = ()
    """The host name and address of each task of its job (a container's ``/etc/hosts``)."""
    host_cwd: Path | None = None
    """Where its container's runtime runs, on this machine (or the node): the job's
    folder. None: ``cwd`` (a process runs there itself)."""


def task_hostname(job_id: str, key: TaskKey) -> str:
    """A task's host name, ``<job>-<role>-<index>`` as one DNS label (lower case letters,
    digits and hyphens, at most 63), the job's id shortened first.

    >>> task_hostname("MNIST_run-1a2b3c4d", ("worker", 2))
    'mnist-run-1a2b3c4d-worker-2'
    """
    tail = f"-{_label(key[0])[:40]}-{key[1]}"
    return _label(job_id)[: 63 - len(tail)].rstrip("-") + tail


def _label(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@dataclass(frozen=True)
class JobLaunch:
    """A start of some of a job's tasks: enough to build each task's launch, anywhere.

    A backend that learns the tasks' addresses only where they land (a cluster engine)
    builds the launches there, from a placement with the real addresses.
    """

    job_id: str
    spec: JobSpec
    placement: Placement
    workdir: Path
    data_dir: DataDir
    attempts: Mapping[TaskKey, int]
    """The tasks to start, each with the number of its attempt (0: the first start)."""
    base: TaskBase = SERVERS
    """Where each task's environment starts (see ``environments.task_base``)."""
    python_dirs: Mapping[str, Path] = field(default_factory=dict)
    """Per role with a Python environment of its own: its ``bin`` folder (``python``)."""
    mask: tuple[bytes, ...] = field(default=(), repr=False)
    """Secret values every task's log shows as ``***`` (``TaskLaunch.mask``)."""
    secrets: Mapping[tuple[str, str], str] = field(default_factory=dict, repr=False)
    """The values of the secrets the job names, by (secret, key); none in a dry run, whose
    tasks show each secret's reference instead."""
    secret_dir: Path | None = None
    """Where the files of secrets given as files are (``write_secret_files`` writes them)."""
    account: Account | None = None
    """The Unix account its tasks run as (its team's); None: this process's own."""
    team: str = "default"
    """The team the job belongs to (a cluster engine charges its account)."""
    server: ServerAccess | None = None
    """Where a notebook job's notebook reaches its server, as its owner; None: it is not
    told (an embedded engine's, or a job that is no notebook)."""

    def task(self, key: TaskKey, placement: Placement | None = None) -> TaskLaunch:
        """The argv, environment, directory, log file and records of one task's attempt."""
        placement = placement or self.placement
        context = TaskContext(self.job_id, self.spec, placement, *key)
        role = self.spec.roles[key[0]]
        image = self.spec.image_of(key[0])
        # In a container, as on Kubernetes: the image's ENV, then the job's and trainfleet's
        # variables; nothing of this machine's (its PATH would hide the image's programs).
        env = self.base.environment() if image is None else {}
        # The job's folder as the task sees it: at its own path, or where the job file
        # mounts it in its containers; the paths trainfleet gives the task name it there.
        mount_point = self.spec.workdir_mount_of(key[0])
        folder = Path(mount_point) if mount_point else self.workdir
        mounts = [Mount(self.workdir, folder)]
        mounts += [
            Mount(self.workdir / mount.source, Path(mount.target), mount.read_only)
            for mount in role.mounts
        ]
        argv = task_argv(context)
        # trainfleet's own programs, run from their files
        for program in (TF_SERVER, NOTEBOOK, RENDEZVOUS, RUN_FUNCTION, RUN_NOTEBOOK):
            if str(program) in argv:
                mounts.append(Mount(program, program, read_only=True))
        python_dir = self.python_dirs.get(key[0])
        if python_dir is not None:  # the job's own environment: its python and pip first
            env["PATH"] = os.pathsep.join([str(python_dir), env.get("PATH", "")])
            env["VIRTUAL_ENV"] = str(python_dir.parent)
            mounts.append(Mount(python_dir.parent, python_dir.parent, read_only=True))
        env.update(task_environment(context))
        env.update(self._checkpoint_variables(key, folder))
        logdir = env.get(LOGDIR_VARIABLE)
        if logdir is not None:  # relative: in the job's folder
            env[LOGDIR_VARIABLE] = self._seen_in(folder, logdir)
        env.update(self._secret_variables(key[0]))
        mask = self.mask or tuple(value.encode() for value in self.secrets.values())
        if key[0] == NOTEBOOK_ROLE and self.spec.notebook is not None:
            env[TOKEN_VARIABLE] = notebook_token(self.data_dir.root, self.job_id)
            env[IDLE_VARIABLE] = f"{self.spec.notebook.idle_timeout:g}"
            mask += (env[TOKEN_VARIABLE].encode(),)  # Jupyter prints its URL with it
            if self.server is not None:  # Client() with no arguments, as the owner
                env.update(self.server.environment())
                mask += (self.server.token.encode(),) if self.server.token else ()
        if self.account is not None:  # the account's name, and a home it may write to
            env |= {"USER": self.account.name, "LOGNAME": self.account.name}
            env["HOME"] = str(folder)
        if self.secret_dir is not None:
            mounts.append(Mount(self.secret_dir, self.secret_dir, read_only=True))
        attempt = self.attempts.get(key, 0)
        share = self.data_dir.task_share(self.job_id)
        if share.is_dir():  # made by make_task_folders (a dry run's launch has none)
            mounts.append(Mount(share, share))
            env[STOP_VARIABLE] = str(self.data_dir.stop_file(self.job_id, *key, attempt))
            env[OUTPUT_VARIABLE] = str(self.data_dir.output_dir(self.job_id))
            if self.spec.progress is not None:
                env[HEARTBEAT_VARIABLE] = str(self.data_dir.heartbeat(self.job_id, *key))
            if image is None:  # an image's own PYTHONPATH is not to be replaced
                python_path = [env.get("PYTHONPATH"), str(self.data_dir.task_python(self.job_id))]
                env["PYTHONPATH"] = os.pathsep.join(part for part in python_path if part)
            if key[0] == RENDEZVOUS_ROLE and self.spec.hosts_rendezvous():
                env[HISTORY_VARIABLE] = str(self.data_dir.rounds(self.job_id))
        record = self.data_dir.record(self.job_id, *key, attempt)
        # Every process of the attempt inherits it, even one that leaves the task's group.
        env[ATTEMPT_VARIABLE] = str(record)
        return TaskLaunch(
            key=key,
            argv=argv,
            env=env,
            cwd=folder / role.working_dir if role.working_dir else folder,
            log_path=self.data_dir.log_path(self.job_id, *key),
            record=record,
            resources=role.resources,
            gpus=placement.slot(*key).gpus,
            mounts=tuple(mounts),
            image=image,
            pull=role.pull,
            image_workdir=role.image_workdir,
            entrypoint=role.command is None,
            mask=mask,
            account=self.account,
            hostname=task_hostname(self.job_id, key),
            hosts=tuple((task_hostname(self.job_id, slot.key), slot.host) for slot in placement),
            host_cwd=self.workdir if image is not None else None,
        )

    def checkpoint_dir(self) -> str:
        """The job's checkpoint folder: its path (relative: to the job's directory; a URL
        as written), else the job's own under the data directory."""
        return self.data_dir.checkpoints_of(self.job_id, self.workdir, self.spec.checkpoint_path)

    def _checkpoint_variables(self, key: TaskKey, folder: Path) -> dict[str, str]:
        """Where checkpoints go, how many stay, which attempt this is, and (once one is
        committed) the newest step to resume from; a path in the job's folder as the task
        sees that folder (``folder``)."""
        variables = {
            PATH_VARIABLE: self._seen_in(folder, self.checkpoint_dir()),
            KEEP_VARIABLE: str(self.spec.checkpoint.keep),
            RESTART_VARIABLE: str(self.attempts.get(key, 0)),
        }
        if self._resume_from is not None:
            variables[RESUME_VARIABLE] = self._seen_in(folder, self._resume_from)
        return variables

    def _seen_in(self, folder: Path, path: str) -> str:
        """``path`` (relative: in the job's folder) as a task sees it where the job's folder
        is ``folder`` to it; a path outside the job's folder, or a URL, as it is."""
        if "://" in path:
            return path
        try:
            return str(folder / (self.workdir / path).relative_to(self.workdir))
        except ValueError:
            return path

    @functools.cached_property
    def _resume_from(self) -> str | None:
        """The newest committed step, read once for all the tasks this launch starts;
        never through a link in the folder's place (it could name another team's steps)."""
        folder = self.checkpoint_dir()
        found = latest(folder) if plain_folder(folder) else None
        return str(found.path) if found is not None else None

    def checkpoint_problem(self) -> str | None:
        """Why the tasks could not write the checkpoint folder the job names (the folder,
        or where it would be made), or None. Looked at as the tasks' account, so that the
        answer says no more than that account could see itself."""
        named = self.spec.checkpoint_path
        if named is None or "://" in named:
            return None
        folder = Path(self.checkpoint_dir())
        probe = ["/bin/sh", WRITABLE_PROBE, str(folder)]
        argv = self.account.command(probe) if self.account is not None else probe
        try:
            seen = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
            verdict, _, existing = seen.stdout.rstrip("\n").partition(" ")
        except (OSError, subprocess.SubprocessError) as error:
            return f"checkpoint.path {folder}: could not look at it: {error}"
        if verdict == "writable":
            return None
        if verdict == "not-a-folder":
            return f"checkpoint.path {folder}: {existing} is not a folder"
        who = f"account {self.account.name}" if self.account else "this process's account"
        return f"checkpoint.path {folder}: {existing} is not writable by {who}"

    def make_task_folders(self) -> None:
        """The folder shared with the job's tasks (theirs to read, not to change), and in
        it the job's output folder, its own checkpoint folder (where it names none) and,
        where its progress is watched, their heartbeats' (theirs to write), each made once."""
        group = self.account.gid if self.account is not None else None
        share = self.data_dir.task_share(self.job_id)
        if not share.is_dir():
            share.parent.mkdir(parents=True, exist_ok=True)  # the job's, as its logs'
            fresh_dir(share, 0o750 if group is not None else 0o700, group)
        writable = [self.data_dir.output_dir(self.job_id)]
        if self.spec.progress is not None:
            writable.append(self.data_dir.heartbeat(self.job_id, "", 0).parent)
        if self.spec.checkpoint_path is None:
            writable.append(self.data_dir.checkpoint_dir(self.job_id))
        if self.spec.hosts_rendezvous():
            writable.append(self.data_dir.rounds(self.job_id).parent)
        for folder in writable:
            if not folder.is_dir():
                fresh_dir(folder, 0o2770 if group is not None else 0o700, group)
        self._share_checkpoint_module(group)

    def _share_checkpoint_module(self, group: int | None) -> None:
        """``trainfleet.checkpoint`` (standard library only) where every task's python finds
        it: a package ``trainfleet`` that also takes in any trainfleet the task's python has
        (``pkgutil.extend_path``), so that one wins where it is installed."""
        archive = self.data_dir.task_python(self.job_id)
        if os.path.lexists(archive):
            return
        mode = 0o640 if group is not None else 0o600
        write_new(archive.parent, archive.name, checkpoint_archive(), mode, group)

    def _secret_variables(self, role: str) -> dict[str, str]:
        """The role's variables that name secrets: their values, or their files' paths; in
        a dry run, which reads no value, the reference as the job file writes it."""
        variables = {}
        for name, ref in self.spec.env_of(role).items():
            if not isinstance(ref, SecretRef):
                continue
            if (ref.secret, ref.key) not in self.secrets:  # a dry run's launch
                variables[name] = _reference(ref)
            elif ref.file:
                variables[name] = str(self.secret_file(ref))
            else:
                variables[name] = self.secrets[(ref.secret, ref.key)]
        return variables

    def secret_file(self, ref: SecretRef) -> Path:
        assert self.secret_dir is not None, "a job with secret files has a secret_dir"
        return self.secret_dir / ref.secret / ref.key

    def write_secret_files(self) -> None:
        """Write the values the job wants as files, once: readable by this process and by
        its tasks' account (its group), writable by none of them, in folders the account
        cannot change (so nothing is ever written there again, see ``datadir.files``)."""
        wanted = [ref for _, ref in self.spec.secret_refs() if ref.file]
        if not wanted or self.secret_dir is None or self.secret_dir.is_dir():
            return
        group = self.account.gid if self.account is not None else None
        folder_mode, file_mode = (0o750, 0o440) if group is not None else (0o700, 0o600)
        staging = self.secret_dir.with_name(f"{self.secret_dir.name}.new")
        fresh_dir(staging, folder_mode, group)
        for ref in wanted:
            secret = staging / ref.secret
            if not secret.is_dir():
                fresh_dir(secret, folder_mode, group)
            value = self.secrets[(ref.secret, ref.key)].encode()
            write_new(secret, ref.key, value, file_mode, group)
        os.rename(staging, self.secret_dir)  # whole, or not there


def _reference(ref: SecretRef) -> str:
    """``{secret: NAME, key: KEY}`` (with ``file: true`` where the task gets a file)."""
    return f"{{secret: {ref.secret}, key: {ref.key}{', file: true' if ref.file else ''}}}"
