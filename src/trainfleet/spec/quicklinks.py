"""A job's quick links (``quicklinks:``, Submarine's ``--quicklink NAME=http://ROLE-INDEX:PORT``):
a page a task serves (a training UI, a profiler), linked from the job and proxied by a
server at ``/jobs/<id>/links/<NAME>/`` to whoever may read the job.

A link reaches its task's own port, never another: PORT becomes the role's fixed ``port:``
(replica INDEX listens on ``port + INDEX``), which trainfleet reserves for the job.

>>> QuickLink.model_validate("http://master-0:8888")
QuickLink(role='master', index=0, port=8888)
>>> QuickLink.model_validate({"role": "worker", "index": 1, "port": 6007}).index
1
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,30}[a-z0-9])?$")
NAME_RULE = "lower-case letters, digits, '-' and '_', at most 32, starting and ending with one"
RESERVED = frozenset({"tensorboard", "notebook"})
"""Names of the services trainfleet runs itself."""

_URL = re.compile(r"^http://([a-z][a-z0-9_]*)-(\d+):(\d+)/?$")
MAX_LINKS = 16


class QuickLink(BaseModel):
    """Which task's page a link opens: a replica of a role, on its port."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    role: str = Field(description="The role whose task serves the page.")
    index: Annotated[int, Field(ge=0)] = Field(default=0, description="Which replica.")
    port: Annotated[int, Field(ge=1, le=65535)] = Field(
        description="The port it listens on: the role's fixed port plus the replica's index."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_url(cls, data: Any) -> Any:
        """``http://ROLE-INDEX:PORT``, as Submarine writes it."""
        if not isinstance(data, str):
            return data
        found = _URL.match(data.strip())
        if found is None:
            raise ValueError(f"{data!r} is not http://ROLE-INDEX:PORT (e.g. http://master-0:8888)")
        role, index, port = found.groups()
        return {"role": role, "index": int(index), "port": int(port)}


def check_name(name: str) -> str:
    """``name``, if a link may have it; ValueError naming the rule otherwise."""
    if not NAME.match(name):
        raise ValueError(f"quicklink name {name!r}: use {NAME_RULE}")
    if name in RESERVED:
        raise ValueError(f"quicklink name {name!r} is trainfleet's own service: choose another")
    return name


def role_ports(links: dict[str, Any], roles: dict[str, Any]) -> dict[str, Any]:
    """``roles`` (as a job file writes them), each role a link reaches given the fixed
    port the link names where it has none: ``port - index``."""
    roles = dict(roles)
    for link in links.values():
        try:
            wanted = QuickLink.model_validate(link)
        except ValueError:
            continue  # refused where the link itself is validated
        role = roles.get(wanted.role)
        if isinstance(role, dict) and role.get("port") is None and wanted.port > wanted.index:
            roles[wanted.role] = {**role, "port": wanted.port - wanted.index}
    return roles
