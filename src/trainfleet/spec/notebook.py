"""A notebook job (``notebook: {idle_timeout}``, ``trainfleet notebook start``).

Its one role, ``notebook``, runs JupyterLab on the task's port, on loopback, under the
job's own Python (image or environment: the kernels run the user's code there), with
``/notebooks/<job id>/`` as its base URL, where a trainfleet server proxies it to its
owner. It ends, and the job succeeds, once Jupyter has seen no activity for
``idle_timeout``.

>>> NotebookSpec.model_validate({"idle_timeout": "30m"}).idle_timeout
1800.0
>>> notebook_role({"resources": {"gpu": 1}})["command"]
['trainfleet', 'notebook-serve']
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainfleet.spec.tensorboard import Duration

ROLE = "notebook"
"""The role a job's ``notebook:`` runs JupyterLab in."""

PROGRAM_WORDS = ("trainfleet", "notebook-serve")
"""Its command, made standalone at launch (``frameworks.argv``): the task's own python."""

PREFIX = "/notebooks/"
"""Where a server serves each notebook: ``/notebooks/<job id>/``, Jupyter's base URL."""

IDLE_VARIABLE = "TRAINFLEET_NOTEBOOK_IDLE"
"""The task finds its idle timeout there, in seconds (0: never)."""

TOKEN_VARIABLE = "JUPYTER_TOKEN"
"""Jupyter's own token, given by the launch (never written in the job)."""

SERVER_VARIABLE = "TRAINFLEET_SERVER"
"""Where ``Client()`` in the notebook finds the server that runs it (``client.py``'s)."""

API_TOKEN_VARIABLE = "TRAINFLEET_TOKEN"
"""Where ``Client()`` finds its token: one of the job's owner, made for the notebook and
revoked when its job ends (``control.notebook_tokens``)."""

CA_VARIABLE = "TRAINFLEET_CA_CERT"
"""Where ``Client()`` finds the CA that signed an HTTPS server's certificate, if private."""

LABEL = "trainfleet/notebook"
"""Every notebook job carries this label (``true``): ``notebook list`` finds them by it."""

ALSO_ALLOWED = frozenset({"tensorboard"})
"""Roles a notebook job may have beside its notebook."""


class NotebookSpec(BaseModel):
    """How long the notebook waits, idle, before it stops."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    idle_timeout: Duration = Field(
        default=3600.0,
        description="Stop the notebook (the job succeeds) once Jupyter has seen no kernel run "
        "code and no terminal used for this long: e.g. 30m; 0 never stops it (default 1h).",
    )


def notebook_role(role: dict[str, Any] | None) -> dict[str, Any]:
    """The notebook's role as a job file writes it: the user's (resources, image,
    environment, env), by default with the notebook's command and restarted never."""
    return {"restart_policy": "never", "command": list(PROGRAM_WORDS), **(role or {})}


def token_of(key: bytes, job_id: str) -> str:
    """The notebook's Jupyter token: a keyed hash of its job's id, so that the launch and
    the proxy (processes of the same installation) find the same one, and nothing stores it.

    >>> token_of(b"k" * 32, "j1") == token_of(b"k" * 32, "j1") != token_of(b"k" * 32, "j2")
    True
    """
    import hashlib
    import hmac

    return hmac.new(key, f"notebook/{job_id}".encode(), hashlib.sha256).hexdigest()
