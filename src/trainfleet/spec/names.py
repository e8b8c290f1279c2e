"""Names that become paths: one rule for every name trainfleet turns into a file or a folder.

Jobs, queues, teams and secrets name folders under the data directory, a secret's key is the
name of the file its value is written to (``file: true``), a mount target is a path in a
container. Whatever else a kind of name allows, it is first a file name: no ``/``, not
``.`` or ``..``, no NUL, at most 253 bytes (``file_name``). The kinds:

>>> secret_key("api-key"), checked(JOB_NAME, "job-1", "lower-case letters, digits and '-'")
('api-key', 'job-1')
>>> secret_key("..")
Traceback (most recent call last):
ValueError: invalid key '..': a key is a file name, and '..' is none
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

MAX_BYTES = 253

JOB_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
"""Jobs, queues and cohorts."""
ACCOUNT_NAME = r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$"
"""Users, teams and tokens: lower-case letters, digits, ``.`` and ``-``, at most 63."""
SECRET_NAME = re.compile(ACCOUNT_NAME)
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
SECRET_KEY_SCHEMA = r"^(?!\.\.?$)[-._a-zA-Z0-9]{1,253}$"
"""``SECRET_KEY`` less ``.`` and ``..``, as editors check it (JSON Schema)."""


def file_name(value: str, what: str = "name") -> str:
    """``value`` where it can be one file name, else ValueError saying why."""
    if "\0" in value:
        raise ValueError(f"invalid {what} {value!r}: it has a NUL character")
    if "/" in value:
        raise ValueError(f"invalid {what} {value!r}: a {what} is a file name, without '/'")
    if value in ("", ".", ".."):
        raise ValueError(
            f"invalid {what} {value!r}: a {what} is a file name, and {value!r} is none"
        )
    if len(value.encode()) > MAX_BYTES:
        raise ValueError(f"invalid {what} {value[:20]!r}...: more than {MAX_BYTES} bytes")
    return value


def checked(pattern: re.Pattern[str], value: str, rule: str, what: str = "name") -> str:
    """``value`` where it is a file name and matches ``pattern``, else ValueError naming
    ``rule`` (what the kind allows)."""
    file_name(value, what)
    if not pattern.match(value):
        raise ValueError(f"invalid {what} {value!r}: use {rule}")
    return value


def secret_key(value: str) -> str:
    """A secret's key: letters, digits, ``-``, ``_`` and ``.``, and a file name."""
    return checked(SECRET_KEY, value, "letters, digits, '-', '_' and '.'", "key")


def path_of_names(value: str, what: str = "path") -> str:
    """An absolute path whose every part is a file name (no ``.`` or ``..`` part)."""
    if not value.startswith("/"):
        raise ValueError(f"{what} {value!r} must be an absolute path (e.g. /data)")
    for part in value.strip("/").split("/"):
        if part in (".", ".."):
            raise ValueError(f"{what} {value!r} must not have a {part!r} part")
        if part:
            file_name(part, f"part of the {what}")
    return value


SecretKey = Annotated[
    str,
    AfterValidator(secret_key),
    WithJsonSchema({"type": "string", "pattern": SECRET_KEY_SCHEMA}),
]
"""A secret's key, as job files, manifests and the API take it."""


def relative_inside(value: str) -> bool:
    """Whether ``value`` names a path inside a folder: relative, not empty, no NUL, and
    not leading out of it once normalised (``a/../b`` stays inside; ``../b`` does not)."""
    normal = posixpath.normpath(value)
    return (
        bool(value.strip())
        and "\0" not in value
        and not posixpath.isabs(value)
        and not normal.startswith("..")
    )
