"""What only a Kubernetes cluster does to a task, on the real local cluster
(``scripts/k8s.sh``): an image it cannot have, a Pod deleted from outside, a container
over its memory limit, secret values kept out of Pods, an API server that stops answering
for a while. The backend contract itself is ``tests/backends/test_conformance.py``."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
from container_images import base_image
from helpers import fill_disk, tmpfs, wait_for
from kube_cluster import kubeconfig, kubectl
from task_reports import EXIT_SECONDS, Reports

from trainfleet.backends.api import NotStarted, Outside
from trainfleet.backends.kubernetes.backend import KubernetesBackend
from trainfleet.backends.kubernetes.manifests import FINALIZER
from trainfleet.backends.launch import JobLaunch
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.conditions import Code
from trainfleet.scheduling.placement import Placement, TaskKey, TaskSlot, task_keys
from trainfleet.spec.backends import KubernetesConfig
from trainfleet.spec.models import JobSpec

WORKER: TaskKey = ("worker", 0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubernetesBackend, Path]]:
    config = KubernetesConfig(kubeconfig=kubeconfig(), host_paths=True)
    backend = KubernetesBackend(config)
    (tmp_path / "work").mkdir()
    yield backend, tmp_path
    for job_id in list(backend._roots):
        backend.release(job_id)


def _job(
    backend: KubernetesBackend, root: Path, role: dict, mask: tuple[bytes, ...] = ()
) -> JobLaunch:
    spec = JobSpec.model_validate(
        {"name": "k8s", "grace_period": 5, "roles": {"worker": {"image": base_image(), **role}}}
    )
    job_id = f"k8s-{secrets.token_hex(4)}"
    addresses = backend.reserve(job_id, spec)
    slots = tuple(TaskSlot(*key, *addresses[key], ()) for key in task_keys(spec))
    attempts = dict.fromkeys(task_keys(spec), 0)
    data_dir = DataDir(root / "data")
    return JobLaunch(job_id, spec, Placement(slots), root / "work", data_dir, attempts, mask=mask)


def _connections_to_the_api(backend: KubernetesBackend) -> set[int]:
    """The local ports of this process's connections to the cluster's API server."""
    api = urlsplit(backend.connection.core.api_client.configuration.host).port
    found = psutil.Process().net_connections("tcp")
    return {c.laddr.port for c in found if c.raddr and c.raddr.port == api}


def _wait_running(reports: Reports, tasks: int = 1) -> None:
    deadline = time.monotonic() + EXIT_SECONDS
    while len({key for key, _, note in reports.places if "running as pod" in note}) < tasks:
        if time.monotonic() > deadline:  # what the cluster says of its Pods (one CI run)
            pods = kubectl("get", "pods", "-o", "wide").stdout
            raise AssertionError(f"{reports.places}\n{pods}")
        time.sleep(0.1)


def test_an_image_the_cluster_cannot_have_fails_the_task_in_its_words(cluster) -> None:
    backend, root = cluster
    job = _job(backend, root, {"command": "true", "image": "localhost/no-such:1", "pull": "never"})
    reports = Reports()
    (handle,) = backend.start(job, reports).values()
    assert not isinstance(handle, NotStarted)
    code, outside = reports.next()
    assert code == 127
    assert outside is not None and outside.cause is Code.PROGRAM_FAILED
    assert "ErrImageNeverPull" in outside.what and "localhost/no-such:1" in outside.what
    wait_for_gone(handle)


def test_a_pod_deleted_outside_trainfleet_is_an_infrastructure_failure(cluster) -> None:
    backend, root = cluster
    job = _job(backend, root, {"command": ["sh", "-c", "echo ready; sleep 600"]})
    reports = Reports()
    (handle,) = backend.start(job, reports).values()
    _wait_running(reports)
    deleted = kubectl("delete", "pod", handle, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    code, outside = reports.next()
    assert code != 0
    assert outside is not None and "deleted outside trainfleet" in outside.what
    assert outside.cause is Code.NODE_LOST, "restarted by policy, as a lost node is"
    wait_for_gone(handle)


def test_a_container_over_its_memory_limit_says_oomkilled(cluster) -> None:
    backend, root = cluster
    program = "x = bytearray(400 * 1024 * 1024); print('survived')"
    job = _job(
        backend, root, {"command": ["python3", "-c", program], "resources": {"memory": "64Mi"}}
    )
    reports = Reports()
    backend.start(job, reports)
    code, outside = reports.next()
    assert code == 137
    assert outside is not None and outside.what.startswith("OOMKilled")
    assert outside.cause is Code.PROGRAM_FAILED


def test_secret_values_reach_the_task_through_a_secret_and_leave_its_log_masked(
    cluster,
) -> None:
    backend, root = cluster
    value = f"hunter-{secrets.token_hex(6)}"
    job = _job(
        backend,
        root,
        {"command": ["sh", "-c", 'echo "key=$API_KEY"; sleep 2'], "env": {"API_KEY": value}},
        mask=(value.encode(),),
    )
    reports = Reports()
    (handle,) = backend.start(job, reports).values()
    pod = json.loads(kubectl("get", "pod", handle, "-o", "json").stdout)
    assert value not in json.dumps(pod), "a Pod's manifest is read by whoever may list pods"
    assert reports.next() == (0, None)
    log = backend.log_path(job.data_dir, job.job_id, WORKER).read_text()
    assert log == "key=***\n"


class PodAtExit(Reports):
    """Reports that look at the task's Pod as its exit is reported."""

    def __init__(self, pod: str = "") -> None:
        super().__init__()
        self.pod, self.seen = pod, ""

    def exited(self, key: TaskKey, returncode: int, outside: Outside | None = None) -> None:
        shown = kubectl("get", "pod", self.pod, "-o", "jsonpath={.metadata.finalizers}")
        self.seen = shown.stdout if shown.returncode == 0 else "gone"
        super().exited(key, returncode, outside)


def test_a_pod_is_let_go_before_its_exit_is_reported(cluster) -> None:
    """A process that ends as soon as its job has (``trainfleet run``) leaves no Pod
    behind: by the time a task's exit is reported, its Pod holds trainfleet's finalizer no
    more (a CI run saw the process abort at its exit, its watch thread mid-request)."""
    backend, root = cluster
    job = _job(backend, root, {"command": "true"})
    reports = PodAtExit()
    (handle,) = backend.start(job, reports).values()
    reports.pod = handle
    assert reports.next() == (0, None)
    assert FINALIZER not in reports.seen, reports.seen
    wait_for_gone(handle)


def test_the_logs_of_many_running_pods_are_copied_by_one_thread_over_few_connections(
    cluster,
) -> None:
    """Eight Pods running at once, each printing a line a second: the backend holds one
    thread for all their log copies (and one for its watch), their streams share HTTP/2
    connections, and every log is whole."""
    backend, root = cluster
    before, connected = threading.active_count(), _connections_to_the_api(backend)
    pods = 8
    jobs = [
        _job(
            backend,
            root,
            {"command": ["sh", "-c", f'for i in $(seq 8); do echo "pod{n}-$i"; sleep 1; done']},
        )
        for n in range(pods)
    ]
    reports = [Reports() for _ in jobs]
    for job, reported in zip(jobs, reports, strict=True):
        backend.start(job, reported)
    for reported in reports:
        _wait_running(reported)
    logs = [backend.log_path(job.data_dir, job.job_id, WORKER) for job in jobs]
    wait_for(lambda: all(log.exists() and log.stat().st_size for log in logs), 30, "lines")
    assert threading.active_count() - before <= 2, [t.name for t in threading.enumerate()]
    opened = _connections_to_the_api(backend) - connected
    assert len(opened) < pods / 2, "log streams share HTTP/2 connections"
    for reported in reports:
        assert reported.next() == (0, None)
    for n, log in enumerate(logs):
        assert log.read_text() == "".join(f"pod{n}-{i}\n" for i in range(1, 9))


def test_a_pod_that_floods_its_log_holds_back_no_other_pods_lines(cluster) -> None:
    """One Pod writes 100,000 numbered lines at about 5,000 a second (a followed stream
    brings them a frame each, more than the copies' loop can read) while another prints a
    line every 0.2 s with the time it printed it: the quiet Pod's lines reach its copy
    within seconds, the flood is copied whole, once and in order (read in turns once it is
    chatty), and the time of its last line is kept in place, not in a new file each time."""
    backend, root = cluster
    flood_lines = (
        "i=0; while [ $i -lt 100 ]; do seq $((i*1000+1)) $((i*1000+1000)) | "
        "sed 's/$/ flood-0123456789-0123456789-0123456789/'; i=$((i+1)); sleep 0.2; done"
    )
    quiet_lines = 'for i in $(seq 60); do echo "quiet-$i $(date +%s.%N)"; sleep 0.2; done'
    flood = _job(backend, root, {"command": ["sh", "-c", flood_lines]})
    quiet = _job(backend, root, {"command": ["sh", "-c", quiet_lines]})
    reports = {job.job_id: Reports() for job in (flood, quiet)}
    for job in (flood, quiet):
        backend.start(job, reports[job.job_id])
    flood_log = backend.log_path(flood.data_dir, flood.job_id, WORKER)
    quiet_log = backend.log_path(quiet.data_dir, quiet.job_id, WORKER)
    stamps = flood.data_dir.job_dir(flood.job_id)
    kept = wait_for(lambda: next(stamps.rglob("*.logged"), None), 60, "a stamp")
    assert isinstance(kept, Path)
    inode = kept.stat().st_ino
    lags: dict[str, float] = {}  # a quiet line: how late this test found it copied
    deadline = time.monotonic() + 60
    while len(lags) < 60 and time.monotonic() < deadline:
        for line in quiet_log.read_text().splitlines() if quiet_log.exists() else []:
            name, _, printed = line.partition(" ")
            lags.setdefault(name, time.time() - float(printed))
        time.sleep(0.05)
    assert reports[quiet.job_id].next() == (0, None)
    assert len(lags) == 60, sorted(lags)
    assert max(lags.values()) < 5, f"quiet lines copied up to {max(lags.values()):.1f} s late"
    assert reports[flood.job_id].next() == (0, None)
    wait_for(
        lambda: flood_log.read_bytes().endswith(b"100000 flood-0123456789-0123456789-0123456789\n"),
        30,
        "the flood's last line",
    )
    numbers = [int(line.split()[0]) for line in flood_log.read_text().splitlines()]
    assert numbers == list(range(1, 100_001))
    assert kept.stat().st_ino == inode, "the stamp is written in place"


def test_without_h2_a_log_is_copied_over_http_1_and_the_server_says_why(
    cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``h2`` comes with the ``kubernetes`` extra; where it is missing, each log stream
    takes a connection of its own, and a warning says how to have it."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "h2" else find_spec(name)
    )
    backend, root = cluster
    job = _job(backend, root, {"command": ["sh", "-c", "echo one; sleep 1; echo two"]})
    reports = Reports()
    backend.start(job, reports)
    assert reports.next() == (0, None)
    assert backend.log_path(job.data_dir, job.job_id, WORKER).read_text() == "one\ntwo\n"
    assert "h2 is not installed (pip install 'trainfleet[kubernetes]')" in caplog.text


def test_an_api_server_away_for_30_s_fails_no_task(cluster) -> None:
    backend, root = cluster
    job = _job(backend, root, {"command": ["sh", "-c", "echo ready; sleep 33; exit 3"]})
    reports = Reports()
    backend.start(job, reports)
    _wait_running(reports)
    apiserver = int(subprocess.check_output(["pgrep", "-o", "-x", "kube-apiserver"]))
    os.kill(apiserver, signal.SIGSTOP)  # it answers nothing, as a server that hangs
    try:
        time.sleep(30)
        assert reports.exits.empty(), "nothing is counted as failed while the API is away"
    finally:
        os.kill(apiserver, signal.SIGCONT)
    assert reports.next() == (3, None), "the watch went on, and saw the exit"
    assert "ready" in backend.log_path(job.data_dir, job.job_id, WORKER).read_text()
    # The node controller, back with the API, may find the node's lease stale and mark it
    # NotReady for a moment: the next test must not start on such a node.
    time.sleep(6)
    _wait_node_ready()


def test_a_start_while_the_api_server_is_away_is_tried_again_never_failed(tmp_path) -> None:
    """Started while the API server answers nothing, every task is NotStarted with
    ``retry`` (its controller starts the same attempt again after a pause, and counts no
    failure); the same start once the API is back makes its Pod."""
    config = KubernetesConfig(kubeconfig=kubeconfig(), host_paths=True, request_timeout=2)
    backend = KubernetesBackend(config)
    (tmp_path / "work").mkdir()
    job = _job(backend, tmp_path, {"command": ["sh", "-c", "echo back"]})
    apiserver = int(subprocess.check_output(["pgrep", "-o", "-x", "kube-apiserver"]))
    os.kill(apiserver, signal.SIGSTOP)
    try:
        away = backend.start(job, Reports())
    finally:
        os.kill(apiserver, signal.SIGCONT)
    try:
        waiting = [s.reason for s in away.values() if isinstance(s, NotStarted) and s.retry]
        assert len(waiting) == len(away) and "did not answer" in waiting[0], away
        _wait_node_ready()
        reports = Reports()
        (handle,) = backend.start(job, reports).values()
        assert not isinstance(handle, NotStarted), handle
        assert reports.next() == (0, None)
        assert backend.log_path(job.data_dir, job.job_id, WORKER).read_text() == "back\n"
    finally:
        backend.release(job.job_id)
        backend.close()


def test_a_task_restarted_alone_after_an_adoption_knows_its_peers_host(cluster) -> None:
    """A new trainfleet (a restarted server) adopts a job's two Pods, then starts one of
    them again alone: the new Pod is told where its peer runs, and the job's root owns
    it as it owns the first ones."""
    backend, root = cluster
    job = _job(backend, root, {"command": ["sleep", "600"], "replicas": 2})
    reports = Reports()
    first = backend.start(job, reports)
    assert not any(isinstance(handle, NotStarted) for handle in first.values()), first
    _wait_running(reports, tasks=2)
    again, adopted = KubernetesBackend(backend.config), Reports()
    try:
        for key in first:
            assert again.adopt(job.data_dir, job.job_id, key, 0, adopted) is not None
        one = ("worker", 1)
        again.abandon(job.data_dir, job.job_id, one)
        (handle,) = again.start(replace(job, attempts={one: 1}), adopted).values()
        pod = json.loads(kubectl("get", "pod", str(handle), "-o", "json").stdout)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        peer = json.loads(env["TRAINFLEET_CLUSTER"])["worker"][0]
        node = json.loads(kubectl("get", "node", pod["spec"]["nodeName"], "-o", "json").stdout)
        internal = next(a for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        assert peer.split(":")[0] == internal["address"], peer
        assert pod["metadata"]["ownerReferences"], "the job's root owns it"
    finally:
        for key in first:
            again.abandon(job.data_dir, job.job_id, key)
        again.release(job.job_id)
        again.close()


def test_a_new_trainfleet_watches_on_from_the_version_the_last_one_reached(cluster) -> None:
    """The watch keeps the version it reached in the data directory: a new trainfleet (a
    restarted server) that adopts a task watches on from there, without listing every Pod
    again, and sees its exit."""
    backend, root = cluster
    job = _job(backend, root, {"command": ["sh", "-c", "sleep 8; exit 5"]})
    reports = Reports()
    backend.start(job, reports)
    _wait_running(reports)
    deadline = time.monotonic() + 10
    while not (kept := list(job.data_dir.root.glob("kubernetes-watch-*.version"))):
        assert time.monotonic() < deadline, "no version kept"
        time.sleep(0.2)
    backend.close()
    before = kept[0].read_text()
    again, adopted = KubernetesBackend(backend.config), Reports()
    listed: list[str] = []
    list_pods = again._list
    again._list = lambda: listed.append("list") or list_pods()  # type: ignore[method-assign]
    try:
        assert again.adopt(job.data_dir, job.job_id, WORKER, 0, adopted) is not None
        assert adopted.next() == (5, None)
        assert listed == [], "it went on from the version kept"
        wait_for(lambda: int(kept[0].read_text()) > int(before), 10, "a newer version kept")
    finally:
        again.release(job.job_id)
        again.close()


def test_a_full_disk_under_the_log_copy_loses_and_repeats_no_line(tmp_path: Path) -> None:
    """The data directory on a real 8 MB tmpfs, filled while the task writes a line every
    0.05 s, then given room again: every line is in the log once, in order, and the exit
    is reported."""
    lines = (  # 300 bytes a line: more than a write buffer's 8 KiB while the disk is full
        'i=0; while [ $i -lt 80 ]; do printf "line-%d-%0290d\\n" $i 0; i=$((i+1)); sleep 0.05; '
        "done; exit 3"
    )
    with tmpfs(tmp_path / "disk", "8m") as disk:
        backend = KubernetesBackend(KubernetesConfig(kubeconfig=kubeconfig(), host_paths=True))
        (disk / "work").mkdir()
        job = _job(backend, disk, {"command": ["sh", "-c", lines]})
        reports = Reports()
        try:
            backend.start(job, reports)
            log = backend.log_path(job.data_dir, job.job_id, WORKER)
            wait_for(lambda: log.exists() and b"line-3" in log.read_bytes(), 60, "line-3")
            fill_disk(disk / "filler")
            time.sleep(4)  # lines come and find no room
            (disk / "filler").unlink()
            assert reports.next() == (3, None)
            wait_for(lambda: b"line-79-" in log.read_bytes(), 30, "the last line")
            written = [line.split("-")[1] for line in log.read_text().splitlines()]
            assert written == [str(i) for i in range(80)]
        finally:
            backend.release(job.job_id)
            backend.close()


def test_a_pod_stopped_before_its_container_starts_ends_and_goes(cluster) -> None:
    """A stop that comes while the kubelet is still making the container (a job cancelled
    as it starts): the task ends, and its Pod does not wait for ever on trainfleet's
    finalizer for an exit the kubelet never reports."""
    backend, root = cluster
    job = _job(backend, root, {"command": ["sleep", "600"]})
    reports = Reports()
    (handle,) = backend.start(job, reports).values()
    backend.stop(handle)  # at once: the kubelet has not made its container yet
    code, _ = reports.next()
    assert code != 0
    wait_for_gone(str(handle))


def wait_for_gone(pod: str, timeout: float = 60) -> None:
    """The Pod's object is gone (trainfleet let go of its finalizer)."""
    deadline = time.monotonic() + timeout
    while kubectl("get", "pod", pod).returncode == 0:
        assert time.monotonic() < deadline, f"pod {pod} is still there"
        time.sleep(0.5)


def test_a_node_that_stops_answering_is_a_lost_node(tmp_path: Path) -> None:
    """The kubelet stopped (SIGSTOP) past the node's grace (24 s in scripts/k8s.sh) and the
    Pod's toleration: the cluster evicts the Pod, whose container never says how it ended;
    the task ends as its node's loss, restarted by policy."""
    config = KubernetesConfig(kubeconfig=kubeconfig(), host_paths=True, node_lost_seconds=1)
    backend = KubernetesBackend(config)
    (tmp_path / "work").mkdir()
    job = _job(backend, tmp_path, {"command": ["sh", "-c", "echo ready; sleep 600"]})
    reports = Reports()
    backend.start(job, reports)
    _wait_running(reports)
    kubelet = int(subprocess.check_output(["pgrep", "-o", "-x", "kubelet"]))
    os.kill(kubelet, signal.SIGSTOP)
    try:
        code, outside = reports.next()
    finally:
        os.kill(kubelet, signal.SIGCONT)
        _wait_node_ready()
        for job_id in list(backend._roots):
            backend.release(job_id)
    assert code == -signal.SIGKILL
    assert outside is not None and outside.cause is Code.NODE_LOST
    assert "was lost: its kubelet stopped answering" in outside.what, outside


def _wait_node_ready(timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        shown = kubectl("get", "nodes", "-o", "json")
        nodes = json.loads(shown.stdout)["items"] if shown.returncode == 0 else []
        ready = [
            c["status"] == "True"
            for node in nodes
            for c in node["status"].get("conditions", [])
            if c["type"] == "Ready"
        ]
        if ready and all(ready):
            return
        assert time.monotonic() < deadline, "the node never came back"
        time.sleep(1)
