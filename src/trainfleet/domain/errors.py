"""Every failure trainfleet reports as a message, and what it means to each face.

Each kind says, once, the HTTP status the server answers it with and the exit code the CLI
ends with; the server's one handler and the CLI's one ``except`` read them from here.
Errors of each layer (a bad job file, a missing job, a store that cannot answer) subclass
the kind they are, so no face needs to know the modules that raise them.

>>> class NoSuchQueue(NotFound): ...
>>> NoSuchQueue("no queue 'x'").status, NoSuchQueue("no queue 'x'").exit_code
(404, 2)
"""

from __future__ import annotations

USAGE_ERROR = 2
"""The CLI's exit code for bad input of any kind (the job's own failure exits 1)."""


class TrainfleetError(Exception):
    """A failure said as a message, never as a traceback."""

    status: int = 500
    """The HTTP status the server answers it with."""
    exit_code: int = 1
    """The code the CLI exits with after ``error: <message>``."""


class BadInput(TrainfleetError):
    """A job, flag, parameter or file that cannot be used as given; the message says why."""

    status = 422
    exit_code = USAGE_ERROR


class Unauthorized(TrainfleetError):
    """No credentials, or ones that are unknown or revoked."""

    status = 401
    exit_code = USAGE_ERROR


class NotFound(TrainfleetError, LookupError):
    """What the request names does not exist (for the caller)."""

    status = 404
    exit_code = USAGE_ERROR


class Conflict(TrainfleetError):
    """The state of what the request names forbids it (deleting a running job)."""

    status = 409
    exit_code = USAGE_ERROR


class Unavailable(TrainfleetError):
    """Something trainfleet depends on cannot answer now (the store, a cluster engine):
    the request may succeed later."""

    status = 503
    exit_code = 1


class Misconfigured(TrainfleetError):
    """The installation's own settings are wrong (a GPU list, a resource flag), not the
    request: the server answers 503; the CLI, whose flags they are, exits 2."""

    status = 503
    exit_code = USAGE_ERROR


class StorageFull(TrainfleetError):
    """No room to store more work until space is freed."""

    status = 507
    exit_code = USAGE_ERROR


class Forbidden(TrainfleetError):
    """The caller sees what the request names but may not do this to it; the message
    names the role needed."""

    status = 403
    exit_code = USAGE_ERROR


class RemoteError(Exception):
    """The function failed in a task, or its job ended without a result: ``str()`` says the
    task, the remote type and message, and the remote traceback. Raised only to the caller
    of ``trainfleet.run`` or ``Client.run`` (no face answers it), so of no kind above: the
    caller's own code failed, not trainfleet."""

    def __init__(
        self, message: str, *, task: str = "", remote_type: str = "", traceback: str = ""
    ) -> None:
        self.task, self.remote_type, self.remote_message = task, remote_type, message
        self.remote_traceback = traceback
        head = f"{task}: {remote_type}: {message}" if remote_type else message
        super().__init__(f"{head}\n\nRemote traceback:\n{traceback}" if traceback else head)
