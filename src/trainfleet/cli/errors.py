"""The CLI's own error: a message for ``error: ...`` and an exit code (2 unless told)."""

from __future__ import annotations

from trainfleet.domain.errors import USAGE_ERROR, BadInput


class UserError(BadInput):
    """Bad input, or a server that refused or could not be reached: a message, no traceback."""

    def __init__(self, message: str, exit_code: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code
