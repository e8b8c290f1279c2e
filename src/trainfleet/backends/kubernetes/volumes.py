"""Where a Pod's files come from: each mount of its task's launch as a volume (pure data).

With ``kubernetes.host_paths``, every node sees this machine's folders at their paths, and
each mount is a ``hostPath`` (``on_hosts``). Without, no path of this machine is one of
the nodes' (``fetched``):

- the job's folder is an ``emptyDir`` that an init container fills from the trainfleet
  server (``GET /api/v1/jobs/{job}/workdir``, with the job's own token, from a Secret of
  the job), and a role's mount of a folder in it is that folder of the ``emptyDir``;
- trainfleet's programs (a TensorFlow server's, a rendezvous store's) come from the job's
  root ConfigMap, and the secret files the job asks for from the task's Secret;
- what trainfleet shares with a task (its stop requests, checkpoints: ``task_share``) is
  the Pod's own ``emptyDir``: tasks share no checkpoint, and none outlives its Pod; its
  output folder is another, empty: a task may write its outputs, none is collected;
- no path of the node's is mounted (a ``hostPath`` follows the node's links, as root).

Either way, a mount of a path under one that ``kubernetes.claims`` names is that folder of
the PersistentVolumeClaim it names (``claimed``): the same job file mounts a shared file
system here and on Slurm, and the claim of the same volume on Kubernetes. Where the data
directory itself is claimed (a volume the server mounts too), the job's folder and share
come from the claim: nothing is fetched, and checkpoints are shared and kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainfleet.backends.launch import Mount, TaskLaunch
from trainfleet.datadir.layout import DataDir

Manifest = dict[str, Any]

TOKEN_KEY = "token"
"""The key of the job's token in its workdir Secret."""
FILE_MODE = 0o440
"""Secret files: readable by their owner and the Pod's group (``fsGroup``: the team's)."""

FETCH = r"""
import os, sys, tarfile, time, urllib.error, urllib.request
url, target = os.environ["TRAINFLEET_WORKDIR_URL"], sys.argv[1]
safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
token = os.environ["TRAINFLEET_WORKDIR_TOKEN"]
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
deadline = time.monotonic() + 120
while True:
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            with tarfile.open(fileobj=answer, mode="r|gz") as tar:
                tar.extractall(target, **safe)
        break
    except urllib.error.HTTPError as error:
        if error.code < 500 or time.monotonic() > deadline:
            said = error.read().decode(errors="replace")[:500]
            sys.exit(f"trainfleet: the job's folder from {url}: {error.code} {said}")
    except (OSError, tarfile.TarError, EOFError) as error:
        if time.monotonic() > deadline:
            sys.exit(f"trainfleet: the job's folder from {url}: {error}")
    time.sleep(2)
"""
"""The init container's program (Python's standard library only): the job's folder from
the server, retried for 2 minutes (it may be restarting), unpacked as the ``data`` filter
allows (no links or paths leading out) where its Python has the filter (3.11.4 and later;
not Debian 12's 3.11.2). Without, a member leading out reaches only the init container's
own file system, which goes with it; and the server sends only what that filter let in."""


@dataclass(frozen=True)
class PodFiles:
    """A Pod's volumes, its task container's mounts of them, and its init containers."""

    volumes: list[Manifest] = field(default_factory=list)
    mounts: list[Manifest] = field(default_factory=list)
    init_containers: list[Manifest] = field(default_factory=list)


Claims = Mapping[Path, str]
"""PersistentVolumeClaims by the path of this machine (and the nodes) they stand for."""


def claimed(source: Path, claims: Claims) -> tuple[str, str] | None:
    """The claim that holds ``source``, and its folder there ("": the whole volume)."""
    source = Path(os.path.normpath(source))  # no way out of the claim through ".."
    for path, claim in claims.items():
        if source.is_relative_to(path):
            sub = source.relative_to(path).as_posix()
            return claim, "" if sub == "." else sub
    return None


def on_hosts(launch: TaskLaunch, kinds: tuple[str, ...], claims: Claims) -> PodFiles:
    """Each mount as its source's ``hostPath``, of ``kinds`` (``Directory``, ``File``),
    which the node checks, or as the claim that holds it."""
    files = PodFiles()
    volumes: dict[str, Manifest] = {}
    for n, (mount, kind) in enumerate(zip(launch.mounts, kinds, strict=True)):
        if _claimed(mount, claims, volumes, files):
            continue
        volumes[f"mount-{n}"] = {
            "name": f"mount-{n}",
            "hostPath": {"path": str(mount.source), "type": kind},
        }
        files.mounts.append(_mount(f"mount-{n}", mount))
    files.volumes.extend(volumes.values())
    return files


def _claimed(mount: Mount, claims: Claims, volumes: dict[str, Manifest], files: PodFiles) -> bool:
    """Mount ``mount`` from the claim that holds it, where one does."""
    found = claimed(mount.source, claims)
    if found is None:
        return False
    claim, sub = found
    name = f"claim-{list(claims.values()).index(claim)}"  # a claim's name may take 63
    volumes[name] = {"name": name, "persistentVolumeClaim": {"claimName": claim}}
    files.mounts.append(_mount(name, mount, sub))
    return True


@dataclass(frozen=True)
class Fetched:
    """How a job's Pods get its files where they share no storage with this machine."""

    url: str
    """The job's folder on the server (``.../api/v1/jobs/{job}/workdir``)."""
    token_secret: str
    """The job's Secret that holds its token (at ``TOKEN_KEY``)."""
    image: str | None
    """The image whose ``python3`` fetches it; None: the task's own."""
    workdir: Path
    """The job's folder on this machine."""
    share: Path
    """What trainfleet shares with the job's tasks on this machine (``task_share``)."""
    root: str
    """The job's root ConfigMap, which holds ``programs``."""
    programs: Mapping[Path, str]
    """trainfleet's program files, each with its key in the root ConfigMap."""
    secret_dir: Path | None = None
    secret_files: Mapping[str, str] = field(default_factory=dict)
    """Each secret file's path under ``secret_dir``, with its key in the task's Secret."""
    empty: bool = False
    """The job's folder starts empty: nothing to fetch."""
    claims: Claims = field(default_factory=dict)


def fetched(launch: TaskLaunch, how: Fetched, secret: str | None) -> PodFiles:
    """The Pod's files as ``how`` says; ``secret``: the task's Secret (which holds the
    secret files, where the job asks for any)."""
    files = PodFiles()
    volumes: dict[str, Manifest] = {}
    for mount in launch.mounts:
        source = mount.source
        if source in how.programs:
            volumes.setdefault("programs", {"name": "programs", "configMap": {"name": how.root}})
            files.mounts.append(_mount("programs", mount, how.programs[source]))
        elif source == how.secret_dir and secret is not None:
            items = [{"key": key, "path": path} for path, key in how.secret_files.items()]
            volumes["secrets"] = {
                "name": "secrets",
                "secret": {"secretName": secret, "items": items, "defaultMode": FILE_MODE},
            }
            files.mounts.append(_mount("secrets", mount))
        elif _claimed(mount, how.claims, volumes, files):
            pass  # the data directory's claim holds the job's folder and share too
        elif source.is_relative_to(how.workdir):
            volumes.setdefault("workdir", {"name": "workdir", "emptyDir": {}})
            sub = source.relative_to(how.workdir).as_posix()
            files.mounts.append(_mount("workdir", mount, "" if sub == "." else sub))
        elif source == how.share:
            volumes.setdefault("share", {"name": "share", "emptyDir": {}})
            files.mounts.append(_mount("share", mount))
            # Its output folder ($TRAINFLEET_OUTPUT_DIR) is there too, empty, for the task
            # to write to as anywhere; gone with the Pod: no output is collected.
            volumes.setdefault("output", {"name": "output", "emptyDir": {}})
            files.mounts.append(_mount("output", Mount(source, mount.target / DataDir.OUTPUT)))
        else:  # the backend refuses a job with any other (a path of the node's)
            raise ValueError(f"no volume of a Pod's holds {source}")
    files.volumes.extend(volumes.values())
    folder = next((m.target for m in launch.mounts if m.source == how.workdir), None)
    if folder is not None and "workdir" in volumes and not how.empty:
        files.init_containers.append(_fetcher(launch, how, folder))
    return files


def _fetcher(launch: TaskLaunch, how: Fetched, folder: Path) -> Manifest:
    token = {"secretKeyRef": {"name": how.token_secret, "key": TOKEN_KEY}}
    return {
        "name": "fetch-workdir",
        "image": how.image or launch.image,
        "command": ["python3", "-c", FETCH, str(folder)],
        "env": [
            {"name": "TRAINFLEET_WORKDIR_URL", "value": how.url},
            {"name": "TRAINFLEET_WORKDIR_TOKEN", "valueFrom": token},
        ],
        "volumeMounts": [{"name": "workdir", "mountPath": str(folder)}],
        "securityContext": {"allowPrivilegeEscalation": False},
        "terminationMessagePolicy": "FallbackToLogsOnError",  # its words, where it fails
    }


def _mount(volume: str, mount: Mount, sub: str = "") -> Manifest:
    made: Manifest = {"name": volume, "mountPath": str(mount.target), "readOnly": mount.read_only}
    if sub:
        made["subPath"] = sub
    return made
