"""What a Pod's object says of its task (pure: a Pod as the API's JSON, no client)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainfleet.backends.kubernetes.manifests import FINALIZER, STOP

FATAL_WAITING = frozenset(
    {
        "ErrImageNeverPull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
"""Why a container waits that it will not get over by itself (an image that cannot be had,
a Secret that is missing): its task fails with the cluster's words. ``ErrImagePull`` alone
is retried by the kubelet, and becomes ``ImagePullBackOff`` when it fails again."""


@dataclass(frozen=True)
class PodState:
    """One Pod, as far as its task goes."""

    name: str
    node: str
    phase: str
    running: bool
    """Its container has started (it runs, or ran and ended)."""
    exit: int | None
    """Its container's exit code, once it ended."""
    reason: str
    """Why it ended: the container's (``OOMKilled``) or the Pod's (``Evicted``)."""
    message: str
    waiting: str
    """Why its container waits (``ContainerCreating``, ``ErrImageNeverPull``)."""
    waiting_message: str
    deleting_since: datetime | None
    """When its deletion ends its grace (the API's ``deletionTimestamp``), while deleted."""
    stop: str | None
    """How trainfleet asked it to stop (``TERM``, ``KILL``), where it did."""
    held: bool
    """trainfleet's finalizer still holds its object."""
    init: str = ""
    """The init container that stands for its task's (``_init_not_done``), where one does."""

    @property
    def fatal(self) -> bool:
        return self.exit is None and self.waiting in FATAL_WAITING

    @property
    def evicted(self) -> bool:
        return self.reason == "Evicted"


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """The state of ``pod`` (the API's JSON of a Pod)."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status") or {}
    init = _init_not_done(status)
    container = init or next(iter(status.get("containerStatuses") or []), {})
    state = container.get("state") or {}
    ended = state.get("terminated")
    waiting = state.get("waiting") or {}
    if init is not None and not waiting and not ended:  # the task's container is to come
        waiting = {"reason": f"PodInitializing ({init.get('name')})"}
    deleting = meta.get("deletionTimestamp")
    return PodState(
        name=meta.get("name", ""),
        node=spec.get("nodeName") or "",
        phase=status.get("phase") or "",
        running=(state.get("running") is not None and init is None) or ended is not None,
        exit=int(ended["exitCode"]) if ended and ended.get("exitCode") is not None else None,
        reason=(ended or {}).get("reason") or status.get("reason") or "",
        message=(ended or {}).get("message") or status.get("message") or "",
        waiting=waiting.get("reason") or "",
        waiting_message=waiting.get("message") or "",
        deleting_since=_time(deleting) if deleting else None,
        stop=(meta.get("annotations") or {}).get(STOP),
        held=FINALIZER in (meta.get("finalizers") or []),
        init=(init or {}).get("name", ""),
    )


def _init_not_done(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first init container (fetching the job's folder) that has not ended well:
    while it waits or runs, or once it failed, it stands for the task's container, which
    never starts after it fails."""
    for init in status.get("initContainerStatuses") or []:
        ended = (init.get("state") or {}).get("terminated") or {}
        if ended.get("exitCode") != 0:
            return init  # type: ignore[no-any-return]
    return None


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
