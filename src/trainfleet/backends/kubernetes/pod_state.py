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

    @property
    def fatal(self) -> bool:
        return self.exit is None and self.waiting in FATAL_WAITING

    @property
    def evicted(self) -> bool:
        return self.reason == "Evicted"


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """The state of ``pod`` (the API's JSON of a Pod)."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status") or {}
    container: Mapping[str, Any] = next(iter(status.get("containerStatuses") or []), {})
    state = container.get("state") or {}
    ended = state.get("terminated")
    waiting = state.get("waiting") or {}
    deleting = meta.get("deletionTimestamp")
    return PodState(
        name=meta.get("name", ""),
        node=spec.get("nodeName") or "",
        phase=status.get("phase") or "",
        running=state.get("running") is not None or ended is not None,
        exit=int(ended["exitCode"]) if ended and ended.get("exitCode") is not None else None,
        reason=(ended or {}).get("reason") or status.get("reason") or "",
        message=(ended or {}).get("message") or status.get("message") or "",
        waiting=waiting.get("reason") or "",
        waiting_message=waiting.get("message") or "",
        deleting_since=_time(deleting) if deleting else None,
        stop=(meta.get("annotations") or {}).get(STOP),
        held=FINALIZER in (meta.get("finalizers") or []),
    )


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
