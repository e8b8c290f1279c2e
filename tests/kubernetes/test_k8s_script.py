"""The single-node Kubernetes of ``scripts/k8s.sh``: a pod of the project's test image runs
on it, its logs come back through kubectl, and no process of the cluster reaches beyond
loopback.

The cluster comes from ``TRAINFLEET_TEST_KUBECONFIG`` (``scripts/k8s.sh start`` prints the
path of its admin kubeconfig). Without the variable these tests skip, except under CI
(``CI`` set), where they fail: CI never skips them.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from container_images import BASE_IMAGE
from helpers import missing
from kube_cluster import KUBECONFIG, kubeconfig

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "k8s.sh"
# The cluster's processes, by /proc/PID/comm (names cut to 15 characters).
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "containerd",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
)


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    kubectl: str
    dir: Path  # the cluster's $TRAINFLEET_K8S_DIR
    cache: Path  # kubectl's (not ~/.kube/cache)

    def run(self, *args: str, input: str | None = None) -> str:
        done = subprocess.run(
            [
                self.kubectl,
                "--kubeconfig",
                str(self.kubeconfig),
                "--cache-dir",
                str(self.cache),
                *args,
            ],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def phase(self, pod: str, namespace: str) -> str:
        return self.run("get", "pod", pod, "-n", namespace, "-o", "jsonpath={.status.phase}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    config = Path(kubeconfig())
    assert config.is_file(), f"{KUBECONFIG}={config}: no such file"
    # k8s.sh's layout: $DIR/etc/admin.kubeconfig, $DIR/bin/kubectl (the cluster's own).
    cluster_dir = config.parent.parent
    own = cluster_dir / "bin" / "kubectl"
    kubectl = str(own) if own.exists() else shutil.which("kubectl")
    if kubectl is None:
        missing(f"kubectl (neither {own} nor on PATH)")
    return Cluster(config, kubectl, cluster_dir, tmp_path_factory.mktemp("kubectl-cache"))


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace of this test only, with its default service account, deleted after."""
    name = f"test-k8s-{secrets.token_hex(3)}"
    cluster.run("create", "namespace", name)
    try:
        deadline = time.monotonic() + 30
        while "default" not in cluster.run("get", "serviceaccounts", "-n", name, "-o", "name"):
            assert time.monotonic() < deadline, f"no default service account in {name}"
            time.sleep(0.2)
        yield name
    finally:
        cluster.run("delete", "namespace", name, "--wait=false")


def test_a_pod_of_the_test_image_runs_and_its_logs_come_back(
    cluster: Cluster, namespace: str
) -> None:
    node = json.loads(cluster.run("get", "nodes", "-o", "json"))["items"]
    images = {
        name for item in node for image in item["status"]["images"] for name in image["names"]
    }
    if BASE_IMAGE not in images:
        missing(f"the image {BASE_IMAGE} in the cluster (run: bash {SCRIPT} import {BASE_IMAGE})")
    marker = secrets.token_hex(8)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hello", "namespace": namespace},
        "spec": {
            "hostNetwork": True,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "hello",
                    "image": BASE_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", f"print('hello', '{marker}')"],
                }
            ],
        },
    }
    cluster.run("apply", "-f", "-", input=json.dumps(pod))
    deadline = time.monotonic() + 60
    while (phase := cluster.phase("hello", namespace)) != "Succeeded":
        ended = phase == "Failed" or time.monotonic() > deadline
        assert not ended, cluster.run("describe", "pod", "hello", "-n", namespace)
        time.sleep(0.2)
    assert cluster.run("logs", "hello", "-n", namespace) == f"hello {marker}\n"


def _cluster_pids(cluster: Cluster) -> dict[int, str]:
    """The cluster's components (their pid files) and containerd's shims, with their names."""
    pids: dict[int, str] = {}
    for component in COMPONENTS:
        try:
            pid = int((cluster.dir / "run" / f"{component}.pid").read_text())
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError):
            continue
        if comm == component[:15]:
            pids[pid] = comm
    socket = f"-address\0{cluster.dir / 'run' / 'containerd.sock'}\0"
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and socket in (proc / "cmdline").read_text():
                pids[int(proc.name)] = (proc / "comm").read_text().strip()
        except OSError:
            continue
    return pids


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]").split("%")[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_no_process_of_the_cluster_reaches_beyond_loopback(cluster: Cluster) -> None:
    pids = _cluster_pids(cluster)
    assert set(pids.values()) >= {c[:15] for c in COMPONENTS}, f"not all running: {pids}"
    if os.geteuid() != 0:
        missing("root, to see the sockets of the cluster's processes (ss -p)")
    lines = subprocess.run(
        ["ss", "-tuanpH"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    seen: set[str] = set()
    beyond: list[str] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 7:
            continue
        _, state, _, _, local, peer = fields[:6]
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid not in pids:
                continue
            seen.add(pids[pid])
            listening = state in ("LISTEN", "UNCONN")
            if not _loopback(local if listening else peer):
                beyond.append(f"{pids[pid]} (pid {pid}): {line}")
    # The check saw the cluster's sockets (the API server listens, the kubelet connects).
    assert {"kube-apiserver", "kubelet", "etcd"} <= seen, seen
    assert not beyond, "\n".join(beyond)
