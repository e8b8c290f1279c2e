"""The one kind of error the CLI prints as a message: ``error: ...`` and an exit code."""

from __future__ import annotations

USAGE_ERROR = 2


class UserError(Exception):
    """Bad input, or a server that refused or could not be reached: a message, no traceback."""

    def __init__(self, message: str, exit_code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code
