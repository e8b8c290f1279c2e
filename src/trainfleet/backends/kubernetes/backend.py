"""The Kubernetes backend: trainfleet stays the controller, as Kubeflow's operator is.

Each task's attempt is one Pod, on the node trainfleet chose, on its node's network at
the port trainfleet chose (``network: host``), so that every task's address is known
before any starts; the job's root ConfigMap owns them (and the Secrets that hold their
secret values). One watch of the namespace's Pods of trainfleet follows them all; a Pod's
finalizer keeps its object until its exit code is read. Logs are copied from the pod log
API into the data directory while the tasks run (``logs``). A task's attempt's ``.pod``
record names its Pod, which is how a restarted trainfleet finds it again. Where the nodes
do not see this machine's folders, each Pod fetches its job's from the server
(``volumes``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from trainfleet.backends.api import (
    BackendError,
    NotStarted,
    Outside,
    Preview,
    TaskHandle,
    TaskReports,
    TaskStatus,
)
from trainfleet.backends.kubernetes import manifests, volumes
from trainfleet.backends.kubernetes.connection import Connection, Unanswered, status_of
from trainfleet.backends.kubernetes.logs import LogCopies, LogCopy
from trainfleet.backends.kubernetes.pod_state import PodState, pod_state
from trainfleet.backends.launch import JobLaunch, TaskLaunch
from trainfleet.backends.supervision.containers import Containers, ImageUnavailable
from trainfleet.backends.supervision.ports import PooledAddresses
from trainfleet.backends.supervision.shim import write_atomically, write_record
from trainfleet.datadir import records
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.conditions import Code
from trainfleet.programs import NOTEBOOK, RENDEZVOUS, RUN_FUNCTION, RUN_NOTEBOOK, TF_SERVER
from trainfleet.scheduling.cluster import Node
from trainfleet.scheduling.placement import Placement, TaskKey, Unschedulable
from trainfleet.scheduling.resources import GPU_UNIT, Resources
from trainfleet.spec.backends import KubernetesConfig
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.models import JobSpec
from trainfleet.vault.service_tokens import workdir_token
from trainfleet.wire import API_PREFIX
from trainfleet.workdirs.store import TREE_MARKER

WATCH_SECONDS = 2
"""How long one watch request lasts: between two, overdue deletions are looked at."""
RETRY_SECONDS = (0.5, 5.0)
"""The first and the longest wait before the watch tries the API again."""
NODES_SECONDS = 5.0
"""How often the nodes are looked at while tasks are followed (is any lost?)."""
LOG_SECONDS = 10.0
"""How long an exit waits for the last of its task's log."""
CLOSE_SECONDS = 3.0
"""How long ``close`` waits for each of its threads."""
OVERDUE = timedelta(seconds=2)
"""How long past its deletion's grace a Pod's container may run before it is asked again."""
FATAL_EXIT = 127
"""The exit status of a task whose container could not be made (no image, no Secret)."""
PROGRAMS = {
    program: program.name
    for program in (TF_SERVER, NOTEBOOK, RENDEZVOUS, RUN_FUNCTION, RUN_NOTEBOOK)
}
"""trainfleet's programs a task may run, each by its key in the job's root ConfigMap."""


def _pod_of(record: Path) -> str | None:
    """The Pod an attempt was given to (its ``.pod`` record), where it was."""
    try:
        return record.with_name(record.name + ".pod").read_text().strip() or None
    except OSError:
        return None


@dataclass
class _Task:
    """A task's Pod, until its exit has been reported."""

    key: TaskKey
    job_id: str
    record: Path
    pod: str
    reports: TaskReports
    log: Path
    mask: tuple[bytes, ...] = field(default=(), repr=False)
    address: str = ""
    state: PodState | None = None
    copy: LogCopy | None = None
    placed: bool = False
    note: str = ""
    stopping: bool = False
    asked_again: bool = False
    """Its Pod, still running past the end of its deletion's grace, was deleted again."""
    final: bool = False
    followed_at: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ended(self) -> bool:
        """Whether its exit is reported, or its container has ended."""
        return self.final or (self.state is not None and self.state.exit is not None)


class KubernetesBackend(PooledAddresses):
    """Runs each task as a Pod of one cluster (``kubernetes:`` in the config file).

    A task's handle is its Pod's name.
    """

    restarts_whole_jobs = True
    queues_tasks = True

    def __init__(self, config: KubernetesConfig, supervised: bool = False) -> None:
        """``supervised``: a server's, which sends jobs' folders to their Pods."""
        self.config = config
        self.supervised = supervised
        self._claims = {Path(path): claim for path, claim in config.claims.items()}
        self.connection = Connection(config)
        self._logs = LogCopies(self.connection)
        self._tasks: dict[str, _Task] = {}
        """Followed tasks, by Pod name."""
        self._hosts: dict[tuple[str, TaskKey], str] = {}
        """Each started task's host, for its peers started later (a task restarted alone)."""
        self._roots: dict[str, list[manifests.Manifest]] = {}
        """The owner reference of each job's root ConfigMap, by job."""
        self._untidy: set[str] = set()
        """Pods whose finalizer or object is still to be removed (the API was away)."""
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._images = Containers()
        """This machine's container runtime, where it has one: what it knows of images."""
        self._node_states: dict[str, float | None] = {}
        """Seconds each node has not been Ready (None: it is), as last looked at."""
        self._nodes_at = -NODES_SECONDS
        """When the nodes were last asked about (monotonic)."""
        self._nodes_listed_at = -NODES_SECONDS
        """When they last answered (what ``_node_states`` says)."""
        self._versions: Path | None = None
        """Where the watch keeps the last resourceVersion it reached, in the data directory,
        so that a restarted trainfleet goes on from there instead of listing every Pod."""
        self._closing = False
        self._response: Any = None
        """The watch's response being read, which ``close`` cuts short."""
        atexit.register(self.close)

    def _declares_workdir(self, image: str) -> bool:
        """Whether ``image`` names a WORKDIR of its own, as this machine's runtime knows it;
        True where it cannot tell (the Pod then runs where Kubernetes runs it)."""
        try:
            return self._images.declares_workdir(image) or not self._images.has(image)
        except ImageUnavailable:  # no runtime here
            return True

    @property
    def _core(self) -> Any:
        return self.connection.core

    def _call(self, what: str, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.connection.call(what, getattr(self._core, name), *args, **kwargs)

    # -- what jobs are admitted onto ------------------------------------------

    def gpu_memory(self) -> int | None:
        return None  # the cluster hands out whole GPUs (nvidia.com/gpu)

    def nodes(self) -> list[Node]:
        return [Node(name, capacity, labels) for name, capacity, labels, _ in self._nodes()]

    def _nodes(self) -> list[tuple[str, Resources, dict[str, str], str]]:
        """Each node that takes Pods: its name, allocatable resources, labels and the
        address its tasks are given."""
        found = self._call("list the cluster's nodes", "list_node", _preload_content=False)
        nodes = []
        for node in json.loads(found.data)["items"]:
            meta, status = node["metadata"], node.get("status", {})
            if node.get("spec", {}).get("unschedulable") or not _ready(status):
                continue
            allocatable = status.get("allocatable", {})
            address = self._address(node)
            nodes.append((meta["name"], _resources(allocatable), meta.get("labels", {}), address))
        return nodes

    def _imaged(self, spec: JobSpec) -> JobSpec:
        """``spec`` with the configured image of its framework (``kubernetes.images``) as
        the job's, where a role of it names none."""
        images = self.config.images
        image = images.get(spec.framework.value) or images.get("default")
        if spec.image is not None or image is None:
            return spec
        return spec.model_copy(update={"image": image})

    def check(self, spec: JobSpec) -> None:
        spec = self._imaged(spec)
        if spec.service_roles():
            raise Unschedulable("tensorboard: runs on the local backend only for now")
        if spec.framework is Framework.MPI:
            raise Unschedulable("framework: mpi runs on the local backend only for now")
        if spec.notebook is not None:
            raise Unschedulable("notebook: notebooks run on the local backend only for now")
        if not self.config.host_paths:
            self._check_fetched(spec)
        for name, role in spec.roles.items():
            if spec.image_of(name) is None:
                raise Unschedulable(
                    f"roles.{name}.image: on Kubernetes every task runs in an image; name "
                    "one (or the config file's kubernetes.images one for its framework)"
                )
            if 0 < role.resources.gpu < 1 or role.resources.gpu_memory:
                raise Unschedulable(
                    f"roles.{name}.resources.gpu: Kubernetes hands out whole GPUs "
                    "(nvidia.com/gpu), not fractions of one"
                )

    def _check_fetched(self, spec: JobSpec) -> None:
        """Unschedulable where the job's Pods cannot fetch its folder from a server, or
        would mount a path of their node's that no claim holds."""
        if not self.supervised:
            raise Unschedulable(
                "kubernetes.host_paths: without host paths each Pod fetches its job's folder "
                "from a trainfleet server, and `trainfleet run` has none: submit the job to a "
                "server whose backend is kubernetes, or set host_paths: true where every node "
                "sees this machine's job folders (one node, or a shared file system)"
            )
        if self.config.server_url is None:
            raise Unschedulable(
                "kubernetes.server_url: without host_paths each Pod fetches its job's folder "
                "from the trainfleet server: give the address Pods reach it at (http://host:port)"
            )
        for name, role in spec.roles.items():
            for index, mount in enumerate(role.mounts):
                source = Path(mount.source)
                if source.is_absolute() and not volumes.claimed(source, self._claims):
                    # A hostPath follows the node's links, as root: a task that may write
                    # there could lead the next one anywhere on the node.
                    raise Unschedulable(
                        f"roles.{name}.mounts[{index}].source: {source} is no folder of the job's "
                        "and no claim holds it (kubernetes.claims): without host_paths a Pod "
                        "mounts no path of its node's"
                    )

    # -- starting ---------------------------------------------------------------

    def dryrun(self, job: JobLaunch) -> Preview:
        """Each task with its node still to be chosen, and the Pods it would be."""
        job = replace(job, spec=self._imaged(job.spec))
        hosts = {slot.key: f"<node of {slot.key[0]}/{slot.key[1]}>" for slot in job.placement}
        placement = _on_hosts(job.placement, hosts)
        launches = [job.task(key, placement) for key in job.attempts]
        owners = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "<the job's>", "uid": ""}]
        pods = [
            self._pod(job, launch, "<chosen at start>", owners, secret="<the task's>")
            for launch in launches
        ]
        import yaml

        return Preview(launches, yaml.safe_dump_all(pods, sort_keys=False))

    def start(self, job: JobLaunch, reports: TaskReports) -> dict[TaskKey, TaskHandle | NotStarted]:
        keys = list(job.attempts)
        job = replace(job, spec=self._imaged(job.spec))
        try:
            job.data_dir.run_dir(job.job_id).mkdir(parents=True, exist_ok=True)
            nodes = self._choose_nodes(job)
            self._check_files(job)
            owners = self._root(job)
        except Unanswered as error:  # nothing made yet but the job's root (found again)
            return {key: NotStarted(str(error), retry=True) for key in keys}
        except (OSError, Unschedulable) as error:
            return {key: NotStarted(str(error)) for key in keys}
        hosts = {
            slot.key: nodes[slot.key][1] if slot.key in nodes else self._peer(job, slot.key)
            for slot in job.placement
        }
        placement = _on_hosts(job.placement, hosts)
        started: dict[TaskKey, TaskHandle | NotStarted] = {}
        for key in keys:
            launch = job.task(key, placement)
            try:
                started[key] = self._create(job, launch, nodes[key][0], owners, reports)
            except OSError as error:  # BackendError among them
                started[key] = NotStarted(str(error))
        return started

    def _check_files(self, job: JobLaunch) -> None:
        """Unschedulable where the nodes see none of this machine's folders (nor a claim
        of them) and the job needs them: it runs in place in a folder (a shared file
        system), not in a copy of a tree it was sent with; or its heartbeats must reach
        trainfleet (``progress``)."""
        if self.config.host_paths:
            return
        in_place = not _sent(job) and any(job.workdir.iterdir())
        if in_place and not volumes.claimed(job.workdir, self._claims):
            raise Unschedulable(
                f"kubernetes.host_paths: the job runs in place in {job.workdir}, which Pods "
                "see only through host paths (or kubernetes.claims); send its folder instead "
                "(trainfleet submit without --server-workdir)"
            )
        share = job.data_dir.task_share(job.job_id)
        if job.spec.progress is not None and not volumes.claimed(share, self._claims):
            raise Unschedulable(
                "progress: a task's heartbeats reach trainfleet only where its Pods see the "
                "data directory: through host paths, or a claim of it (kubernetes.claims)"
            )

    def _peer(self, job: JobLaunch, key: TaskKey) -> str:
        """The host of a task this start does not start (it runs on)."""
        with self._lock:
            return self._hosts.get((job.job_id, key), "")

    def _create(
        self,
        job: JobLaunch,
        launch: TaskLaunch,
        node: str,
        owners: list[manifests.Manifest],
        reports: TaskReports,
    ) -> TaskHandle:
        """The Secret (where the task has secret values) and the Pod of ``launch``."""
        for mount in launch.mounts if self.config.host_paths else ():
            if volumes.claimed(mount.source, self._claims):
                continue  # the claim's, not this machine's
            if not mount.source.exists():  # else the Pod would wait for it for ever
                raise BackendError(f"mount source {mount.source} does not exist")
        attempt = job.attempts[launch.key]
        name = manifests.pod_name(job.job_id, launch.key, attempt)
        namespace = self.config.namespace
        hidden = manifests.secret_variables(launch)
        if not self.config.host_paths:  # its secret files too, where it asks for any
            hidden |= dict(_secret_files(job).values())
        if hidden:
            body = manifests.secret_manifest(name, namespace, hidden, owners)
            self._replace("create_namespaced_secret", "delete_namespaced_secret", name, body)
        if launch.image_workdir and not self._declares_workdir(launch.image or ""):
            launch = replace(launch, image_workdir=False)  # as podman runs it here
        pod = self._pod(job, launch, node, owners, name if hidden else None)
        write_record(f"{launch.record}.pod", name)  # first: a Pod is never made unrecorded
        self._replace("create_namespaced_pod", "delete_namespaced_pod", name, pod)
        port = job.placement.slot(*launch.key).port
        host = dict(launch.hosts).get(launch.hostname, "")
        with self._lock:
            self._hosts[(job.job_id, launch.key)] = host
        task = _Task(
            launch.key,
            job.job_id,
            launch.record,
            name,
            reports,
            launch.log_path,
            launch.mask,
            f"{host}:{port}" if port else "",
        )
        return self._follow(task, job.data_dir)

    def _pod(
        self,
        job: JobLaunch,
        launch: TaskLaunch,
        node: str,
        owners: list[manifests.Manifest],
        secret: str | None,
    ) -> manifests.Manifest:
        if self.config.host_paths:
            kinds = tuple("Directory" if m.source.is_dir() else "File" for m in launch.mounts)
            files = volumes.on_hosts(launch, kinds, self._claims)
        else:
            files = volumes.fetched(launch, self._fetched(job), secret)
        return manifests.pod_manifest(
            launch,
            job_id=job.job_id,
            attempt=job.attempts[launch.key],
            namespace=self.config.namespace,
            node=node,
            grace_period=job.spec.grace_period,
            node_lost_seconds=self.config.node_lost_seconds,
            owners=owners,
            files=files,
            secret=secret,
        )

    def _fetched(self, job: JobLaunch) -> volumes.Fetched:
        """How ``job``'s Pods get its files without host paths (``volumes``)."""
        server = (self.config.server_url or "").rstrip("/")
        secret_files = _secret_files(job)
        return volumes.Fetched(
            url=f"{server}{API_PREFIX}/jobs/{job.job_id}/workdir",
            token_secret=manifests.workdir_secret_name(job.job_id),
            image=self.config.fetch_image,
            workdir=job.workdir,
            share=job.data_dir.task_share(job.job_id),
            root=manifests.root_name(job.job_id),
            programs=PROGRAMS,
            secret_dir=job.secret_dir,
            secret_files={path: key for path, (key, _) in secret_files.items()},
            empty=not _sent(job),
            claims=self._claims,
        )

    def _replace(self, create: str, delete: str, name: str, body: manifests.Manifest) -> None:
        """Create ``body``; where an object of its name is left from an earlier try of the
        same attempt (a start the server did not live to record), delete that one first."""
        namespace = self.config.namespace
        what = f"create {body['kind']} {namespace}/{name}"
        try:
            self._call(what, create, namespace, body)
        except BackendError as error:
            if status_of(error) != 409:
                raise
            if body["kind"] == "Pod":
                self._forget(name)
            with contextlib.suppress(BackendError):
                self._call(what, delete, name, namespace, grace_period_seconds=0)
            time.sleep(0.5)
            self._call(what, create, namespace, body)

    def _root(self, job: JobLaunch) -> list[manifests.Manifest]:
        """The owner reference of the job's root ConfigMap, made on its first start."""
        job_id = job.job_id
        with self._lock:
            known = self._roots.get(job_id)
        if known:  # none yet, or only known of (an adopted task's job)
            return known
        namespace = self.config.namespace
        fetched = not self.config.host_paths
        programs = {key: path.read_text() for path, key in PROGRAMS.items()} if fetched else {}
        body = manifests.root_manifest(job_id, namespace, programs)
        name = body["metadata"]["name"]
        try:
            made = self._call(
                f"create ConfigMap {namespace}/{name}",
                "create_namespaced_config_map",
                namespace,
                body,
                _preload_content=False,
            )
        except BackendError as error:
            if status_of(error) != 409:
                raise
            made = self._call(
                f"read ConfigMap {namespace}/{name}",
                "read_namespaced_config_map",
                name,
                namespace,
                _preload_content=False,
            )
        owners = manifests.owned_by(json.loads(made.data))
        if fetched:
            self._token_secret(job, owners)
        with self._lock:
            self._roots[job_id] = owners
        return owners

    def _token_secret(self, job: JobLaunch, owners: list[manifests.Manifest]) -> None:
        """The job's Secret that holds its folder's token (the same on every start)."""
        name = manifests.workdir_secret_name(job.job_id)
        token = workdir_token(job.data_dir.root, job.job_id)
        body = manifests.secret_manifest(
            name, self.config.namespace, {volumes.TOKEN_KEY: token}, owners
        )
        try:
            self._call(
                f"create Secret {name}",
                "create_namespaced_secret",
                body["metadata"]["namespace"],
                body,
            )
        except BackendError as error:
            if status_of(error) != 409:
                raise

    def _choose_nodes(self, job: JobLaunch) -> dict[TaskKey, tuple[str, str]]:
        """A node (name, address) for each task of the start: the first with room left
        for it, after what the Pods running there request."""
        nodes = self._nodes()
        if not nodes:
            raise Unschedulable("the cluster has no node that takes Pods (all not ready?)")
        free = {name: capacity for name, capacity, _, _ in nodes}
        for node, used in self._requested().items():
            if node in free:
                free[node] = free[node] - used
        chosen = {}
        for key in job.attempts:
            wanted = _wanted(job.spec, key[0])
            for name, _, _, address in nodes:
                if wanted.fits(free[name]):
                    free[name] = free[name] - wanted
                    chosen[key] = (name, address)
                    break
            else:
                raise Unschedulable(
                    f"roles.{key[0]}.resources: no node of the cluster has room for task "
                    f"{key[0]}/{key[1]} now"
                )
        return chosen

    def _requested(self) -> dict[str, Resources]:
        """What the Pods that have not ended request, by node."""
        found = self._call(
            "list the cluster's pods",
            "list_pod_for_all_namespaces",
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _preload_content=False,
        )
        used: dict[str, Resources] = {}
        for pod in json.loads(found.data)["items"]:
            node = pod.get("spec", {}).get("nodeName")
            if not node:
                continue
            for container in pod["spec"].get("containers", []):
                asked = _resources(container.get("resources", {}).get("requests", {}))
                used[node] = used.get(node, Resources()) + asked
        return used

    # -- following --------------------------------------------------------------

    def _follow(self, task: _Task, data_dir: DataDir) -> TaskHandle:
        with self._lock:
            self._tasks[task.pod] = task
            if self._versions is None:
                self._versions = self._versions_file(data_dir)
            self._watch()
        return TaskHandle(task.pod)

    def _versions_file(self, data_dir: DataDir) -> Path:
        """This cluster's and namespace's file of the watch's version (another cluster's
        versions mean nothing here)."""
        import hashlib

        host = self._core.api_client.configuration.host  # asked already: it answered
        which = hashlib.sha256(f"{host}\0{self.config.namespace}".encode()).hexdigest()[:16]
        return data_dir.root / f"kubernetes-watch-{which}.version"

    def _forget(self, pod: str) -> None:
        with self._lock:
            self._tasks.pop(pod, None)

    def _watch(self) -> None:
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._loop, name="kubernetes", daemon=True)
            self._watcher.start()

    def close(self) -> None:
        """Stop the watch and the log copies before this process ends (a thread left in
        the middle of a TLS read when the interpreter finalizes aborts it); their tasks
        run on, for a later process to adopt."""
        self._closing = True
        with contextlib.suppress(Exception):
            self._response.shutdown()
        self._logs.close()
        if self._watcher is not None:
            self._watcher.join(CLOSE_SECONDS)

    def _loop(self) -> None:
        version = kept = self._kept_version()
        pause = RETRY_SECONDS[0]
        said = ""
        while not self._closing:
            try:
                if version is None:
                    version = self._list()
                version = self._watch_from(version)
                if version != kept:
                    self._keep_version(version)
                    kept = version
                pause, said = RETRY_SECONDS[0], ""
            except Exception as error:  # the API is away: nothing is counted as failed
                if self._closing:
                    return
                text = str(self.connection.error("watch pods", error))
                if text != said:
                    print(f"trainfleet: kubernetes: {text}", file=sys.stderr)
                    said = text
                time.sleep(pause)
                pause = min(2 * pause, RETRY_SECONDS[1])
            if not self._closing:
                self._sweep()

    def _kept_version(self) -> str | None:
        """The version an earlier trainfleet's watch reached, where it kept one."""
        try:
            return self._versions.read_text().strip() or None if self._versions else None
        except OSError:
            return None

    def _keep_version(self, version: str | None) -> None:
        """Keep ``version`` for a later trainfleet; what cannot be written (a full disk)
        only costs that one a list of the Pods."""
        if self._versions is None:
            return
        with contextlib.suppress(OSError):
            if version is None:
                self._versions.unlink(missing_ok=True)
            else:
                write_atomically(str(self._versions), version)

    def _list(self) -> str:
        found = self._call(
            "list pods",
            "list_namespaced_pod",
            self.config.namespace,
            label_selector=manifests.SELECTOR,
            _preload_content=False,
        )
        listing = json.loads(found.data)
        seen = set()
        for pod in listing["items"]:
            seen.add(pod["metadata"]["name"])
            self._seen(pod, gone=False)
        with self._lock:
            missing = [task for name, task in self._tasks.items() if name not in seen]
        for task in missing:  # deleted while nobody watched
            self._update(task, task.state, gone=True)
        return str(listing["metadata"]["resourceVersion"])

    def _watch_from(self, version: str) -> str | None:
        """Follow changes from ``version`` for a while; the version reached, or None
        where the API has forgotten ``version`` (list again)."""
        response = self._core.list_namespaced_pod(
            self.config.namespace,
            label_selector=manifests.SELECTOR,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(self.config.request_timeout, WATCH_SECONDS + 10),
        )
        self._response = response
        if self._closing:  # ``close`` came between the request and the line above
            with contextlib.suppress(Exception):  # urllib3 < 2.3 has no shutdown
                response.shutdown()
        try:
            for line in response:
                event = json.loads(line)
                pod = event["object"]
                if event["type"] == "ERROR":
                    return None if pod.get("code") == 410 else version
                version = pod["metadata"].get("resourceVersion", version)
                if event["type"] != "BOOKMARK":
                    self._seen(pod, gone=event["type"] == "DELETED")
        finally:
            response.release_conn()
        return version

    def _seen(self, pod: dict[str, Any], gone: bool) -> None:
        with self._lock:
            task = self._tasks.get(pod["metadata"]["name"])
        if task is not None:
            self._update(task, pod_state(pod), gone)

    def _sweep(self) -> None:
        """Tasks on nodes that were lost, and tidying left to do."""
        with self._lock:
            tasks = list(self._tasks.values())
            untidy, self._untidy = self._untidy, set()
        if tasks:
            self._look_at_nodes()
        for task in tasks:
            if task.state is not None:
                self._update(task, task.state, gone=False)
        for pod in untidy:
            self._tidy(pod)

    def _update(self, task: _Task, state: PodState | None, gone: bool) -> None:
        """Act on what the Pod says now; one thread at a time per task (the watch, and an
        adoption's first look, may both say it)."""
        with task.lock:
            self._act(task, state, gone)

    def _act(self, task: _Task, state: PodState | None, gone: bool) -> None:
        if task.final:
            return
        task.state = state or task.state
        if state is not None and state.running and task.copy is None:
            copied = LogCopy(task.pod, task.log, task.mask, task.record, task.ended)
            task.copy = self._logs.start(copied)
        if state is not None and not task.placed:
            self._place(task, state)
        verdict = self._verdict(task, state, gone)
        if verdict is not None:
            self._end(task, *verdict)

    def _place(self, task: _Task, state: PodState) -> None:
        where = f"pod {self.config.namespace}/{task.pod} on node {state.node}"
        if state.running:
            task.placed = True
            task.reports.placed(task.key, task.address, f"running as {where}")
            return
        waiting = f": {state.waiting}" if state.waiting else ""
        note = f"starting as {where}{waiting}"
        if note != task.note:
            task.note = note
            task.reports.placed(task.key, "", note)

    def _verdict(
        self, task: _Task, state: PodState | None, gone: bool
    ) -> tuple[int, Outside | None] | None:
        """The exit to report, once the Pod says it (or says nothing more ever)."""
        name = f"pod {task.pod}"
        stopped = task.stopping or (state is not None and state.stop is not None)
        outside_delete = Outside(f"{name} was deleted outside trainfleet")
        if state is not None and state.exit is not None:
            outside = None
            if state.init:  # the task's container never started
                words = state.message.strip() or state.reason
                outside = Outside(f"{name}: its init container {state.init} failed: {words}")
            elif state.evicted:
                outside = Outside(f"Kubernetes evicted {name}: {state.message}")
            elif state.deleting_since is not None and not stopped:
                outside = outside_delete
            elif state.reason == "OOMKilled":
                outside = Outside(
                    "OOMKilled: it went over its memory limit", cause=Code.PROGRAM_FAILED
                )
            return state.exit, outside
        if gone:
            return -signal.SIGKILL, None if stopped else outside_delete
        if state is None:
            return None
        if state.fatal:
            why = f"{state.waiting}: {state.waiting_message}".rstrip(": ")
            return FATAL_EXIT, Outside(why, cause=Code.PROGRAM_FAILED)
        if state.phase in ("Failed", "Succeeded"):  # ended with no container status
            return -signal.SIGKILL, Outside(f"Kubernetes ended {name}: {state.reason}")
        deleting = state.deleting_since
        if deleting is not None and datetime.now(UTC) >= deleting + OVERDUE:
            if not state.running:
                # Deleted before its container ran: the kubelet (1.20) says no more of a
                # container it did not start, and the Pod would wait on our finalizer.
                return -signal.SIGKILL, None if stopped else outside_delete
            if not task.asked_again:
                # Deleted while its container was being made, the kubelet (1.20) started
                # it anyway and kills it only much later (75-90 s): ask again, at once.
                task.asked_again = True
                self._delete(task.pod, force=True)
        # A Pod's kubelet says how its container ended, even when it was deleted and however
        # long its grace (kubelet 1.20 does not shorten one begun); only a lost node never does.
        # Kubernetes evicts from a lost node only while others of its zone are well (not
        # from a cluster of one), so trainfleet looks at the node itself.
        lost = self._lost(state.node, task.followed_at) if state.node else None
        if lost is not None:
            return -signal.SIGKILL, Outside(f"{lost} ({name})")
        return None

    def _lost(self, node: str, since: float) -> str | None:
        """Why ``node`` will say nothing more of its Pods, where it will not: it is no
        more (as the nodes looked at after ``since``), or it has not answered for
        ``node_lost_seconds``."""
        with self._lock:
            seen, at = self._node_states, self._nodes_listed_at
        if node not in seen:
            return f"node {node} was removed from the cluster" if at > since else None
        silent = seen[node]
        if silent is None or silent < self.config.node_lost_seconds:
            return None
        return f"node {node} was lost: its kubelet stopped answering {silent:.0f} s ago"

    def _look_at_nodes(self) -> None:
        """How long each node has not been Ready (None: it is), every ``NODES_SECONDS``
        while tasks are followed."""
        now = time.monotonic()
        if now - self._nodes_at < NODES_SECONDS:
            return
        self._nodes_at = now
        try:
            found = self._call("list the cluster's nodes", "list_node", _preload_content=False)
        except BackendError:
            return  # the API is away: what was seen stands
        states: dict[str, float | None] = {}
        for node in json.loads(found.data)["items"]:
            ready = next(
                (c for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"),
                None,
            )
            silent = None
            if ready is not None and ready.get("status") != "True":
                since = datetime.fromisoformat(ready["lastTransitionTime"].replace("Z", "+00:00"))
                silent = (datetime.now(UTC) - since).total_seconds()
            states[node["metadata"]["name"]] = silent
        with self._lock:
            self._node_states, self._nodes_listed_at = states, now

    def _end(self, task: _Task, status: int, outside: Outside | None) -> None:
        """Report the task's exit once, with its whole log, then let its Pod go."""
        with self._lock:
            if task.final:
                return
            task.final = True
            self._tasks.pop(task.pod, None)
        if task.copy is not None:
            task.copy.wait(LOG_SECONDS)
        write_record(f"{task.record}.exit", str(status))
        # Let go before the report: a process that ends once its job has (``trainfleet
        # run``) would leave the Pod behind, its thread cut mid-request at its exit.
        self._tidy(task.pod)
        task.reports.exited(task.key, status, outside)

    def _tidy(self, pod: str) -> None:
        """Remove the finalizer and the object of an ended task's Pod, and its Secret."""
        namespace = self.config.namespace
        try:
            with contextlib.suppress(BackendError):  # gone already
                self._call(
                    f"let pod {pod} go",
                    "patch_namespaced_pod",
                    pod,
                    namespace,
                    {"metadata": {"finalizers": None}},
                )
            for kind in ("pod", "secret"):
                try:
                    self._call(
                        f"delete {kind} {pod}",
                        f"delete_namespaced_{kind}",
                        pod,
                        namespace,
                        grace_period_seconds=0,
                    )
                except BackendError as error:
                    if status_of(error) != 404:
                        raise
        except BackendError:
            with self._lock:
                self._untidy.add(pod)

    # -- the rest of the contract -------------------------------------------------

    def describe(self, handle: TaskHandle) -> TaskStatus:
        with self._lock:
            task = self._tasks.get(handle)
        node = task.state.node if task and task.state else ""
        where = f"pod {self.config.namespace}/{handle}" + (f" on node {node}" if node else "")
        return TaskStatus(handle, where)

    def stop(self, handle: TaskHandle, force: bool = False) -> None:
        """Delete the task's Pod: its kubelet sends SIGTERM and, after the job's grace
        period (``force``: at once), SIGKILL; its finalizer keeps the exit code."""
        with self._lock:
            task = self._tasks.get(handle)
        if task is None:
            return
        task.stopping = True
        self._delete(handle, force)

    def _delete(self, pod: str, force: bool) -> None:
        namespace = self.config.namespace
        with contextlib.suppress(BackendError):  # ended meanwhile: the watch says how
            self._call(
                f"mark pod {pod}",
                "patch_namespaced_pod",
                pod,
                namespace,
                {"metadata": {"annotations": {manifests.STOP: "KILL" if force else "TERM"}}},
            )
            self._call(
                f"delete pod {pod}",
                "delete_namespaced_pod",
                pod,
                namespace,
                grace_period_seconds=0 if force else None,
            )

    def log_path(self, data_dir: DataDir, job_id: str, key: TaskKey) -> Path:
        return data_dir.log_path(job_id, *key)  # copied here from the pod log API

    def last_attempt(self, data_dir: DataDir, job_id: str, key: TaskKey) -> int | None:
        # .pid: an attempt an earlier (local) backend of this data directory started.
        return records.last_attempt(data_dir.run_dir(job_id), *key, suffixes=(".pid", ".pod"))

    def adopt(
        self, data_dir: DataDir, job_id: str, key: TaskKey, attempt: int, reports: TaskReports
    ) -> TaskHandle | None:
        record = data_dir.record(job_id, *key, attempt)
        status = records.exit_status(record)
        pod = _pod_of(record)
        if pod is None or status is not None:  # ended, or not a Pod
            reports.exited(key, -signal.SIGKILL if status is None else status)
            return None
        try:
            found = self._call(
                f"read pod {pod}",
                "read_namespaced_pod",
                pod,
                self.config.namespace,
                _preload_content=False,
            )
        except BackendError as error:
            if status_of(error) != 404:
                raise
            write_record(f"{record}.exit", str(-signal.SIGKILL))
            reports.exited(key, -signal.SIGKILL, Outside(f"pod {pod} is gone"))
            return None
        task = _Task(key, job_id, record, pod, reports, data_dir.log_path(job_id, *key))
        task.mask = self._secret_values(pod)
        seen = json.loads(found.data)
        node = seen.get("spec", {}).get("nodeName") or ""
        host = self._address_of(node) if node else ""
        with self._lock:
            self._roots.setdefault(job_id, [])
            self._hosts[(job_id, key)] = host  # for a peer restarted alone
        handle = self._follow(task, data_dir)
        self._seen(seen, gone=False)
        return handle

    def _address_of(self, node: str) -> str:
        """The address ``node`` gives its tasks ("" where the API does not say)."""
        try:
            found = self._call(f"read node {node}", "read_node", node, _preload_content=False)
        except BackendError:
            return ""
        return self._address(json.loads(found.data))

    def _address(self, node: Mapping[str, Any]) -> str:
        """Which of ``node``'s addresses its tasks are given (``address_type``; its name
        where it has none of that type)."""
        addresses = node.get("status", {}).get("addresses", [])
        found = (a["address"] for a in addresses if a["type"] == self.config.address_type)
        return str(next(found, node["metadata"]["name"]))

    def _secret_values(self, pod: str) -> tuple[bytes, ...]:
        """The values a Pod's log must not show: its Secret's (see ``secret_variables``)."""
        import base64

        try:
            found = self._call(
                f"read secret {pod}",
                "read_namespaced_secret",
                pod,
                self.config.namespace,
                _preload_content=False,
            )
        except BackendError:
            return ()
        data = json.loads(found.data).get("data") or {}
        return tuple(base64.b64decode(value) for value in data.values())

    def abandon(self, data_dir: DataDir, job_id: str, key: TaskKey) -> None:
        attempt = self.last_attempt(data_dir, job_id, key)
        pod = None if attempt is None else _pod_of(data_dir.record(job_id, *key, attempt))
        if pod is not None:
            self._delete(pod, force=True)
            self._tidy(pod)

    def release(self, job_id: str) -> None:
        """The job has ended: its ports, and its root ConfigMap (what it still owns goes
        with it), unless a task of it is still followed (a server shutting down)."""
        super().release(job_id)
        with self._lock:
            known = job_id in self._roots
            running = any(task.job_id == job_id for task in self._tasks.values())
            if known and not running:
                del self._roots[job_id]
        if known and not running:
            name = manifests.root_name(job_id)
            with contextlib.suppress(BackendError):
                self._call(
                    f"delete ConfigMap {name}",
                    "delete_namespaced_config_map",
                    name,
                    self.config.namespace,
                )


def _ready(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
    )


def _resources(amounts: Mapping[str, Any]) -> Resources:
    """Kubernetes quantities (``cpu: 1500m``, ``memory: 2Gi``, ``nvidia.com/gpu: 1``)."""
    from kubernetes.utils.quantity import parse_quantity

    def amount(name: str, scale: int = 1) -> int:
        quantity = parse_quantity(amounts.get(name, 0))  # type: ignore[no-untyped-call]
        return int(quantity * scale)

    return Resources(
        cpu=amount("cpu", 1000),
        memory=amount("memory"),
        gpu=amount(manifests.GPU_RESOURCE) * GPU_UNIT,
    )


def _wanted(spec: JobSpec, role: str) -> Resources:
    asked = spec.roles[role].resources
    return Resources(cpu=asked.cpu or 0, memory=asked.memory or 0, gpu=round(asked.gpu) * GPU_UNIT)


def _on_hosts(placement: Placement, hosts: Mapping[TaskKey, str]) -> Placement:
    """``placement`` with each task on the host ``hosts`` names, and no GPUs of this
    machine's (the cluster's device plugin gives each Pod its own)."""
    return Placement(tuple(replace(slot, host=hosts[slot.key], gpus=()) for slot in placement))


def _secret_files(job: JobLaunch) -> dict[str, tuple[str, str]]:
    """Each secret file the job asks for, by its path under its secret folder: its key in
    a task's Secret, and its value ("" in a dry run)."""
    wanted = sorted({(ref.secret, ref.key) for _, ref in job.spec.secret_refs() if ref.file})
    return {
        f"{secret}/{key}": (f"trainfleet.file.{n}", job.secrets.get((secret, key), ""))
        for n, (secret, key) in enumerate(wanted)
    }


def _sent(job: JobLaunch) -> bool:
    """Whether the job's folder is a copy of a tree it was sent with (the server's)."""
    return (job.data_dir.job_dir(job.job_id) / TREE_MARKER).is_file()
