"""The keys that encrypt secrets at rest: Fernet (AES-128-CBC with an HMAC), several at once.

Where the keys come from:

- ``TRAINFLEET_SECRET_KEY``: one or more Fernet keys separated by commas;
- else the key file ``<data dir>/secret.key``, made on first use (owner-only, mode 0600,
  from its creation on): one key a line.

The first key encrypts; every key decrypts. That makes rotation possible without downtime:

1. add a new key first, keeping the old ones: ``rotate_key_file`` does this to the key
   file; with the variable, ``TRAINFLEET_SECRET_KEY=NEW,OLD``. Values stored with the old
   key still decrypt, and new ones are encrypted with the new key;
2. re-encrypt every stored value with ``Keyring.rotate`` (``needs_rotation`` says which
   values are not encrypted with the first key yet);
3. then drop the old key (delete its line, or its part of the variable).

Losing every key that encrypted a stored value loses that value: back the key file up.
A key never appears in a message.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from trainfleet.datadir.space import DISK_FULL, DiskFull
from trainfleet.domain.errors import Misconfigured

KEY_VARIABLE = "TRAINFLEET_SECRET_KEY"
KEY_FILE = "secret.key"
PRIVATE_FILE = 0o600


class VaultError(Misconfigured):
    """The secret keys are missing, malformed, or cannot decrypt a stored value."""


class Keyring:
    """Encrypts with the first key, decrypts with any (``MultiFernet``)."""

    def __init__(self, keys: Sequence[bytes], source: str) -> None:
        """``keys``: Fernet keys, the primary first; ``source``: where they come from, as
        said in messages (``TRAINFLEET_SECRET_KEY``, or the key file's path)."""
        if not keys:
            raise VaultError(f"{source} holds no key")
        self.source = source
        self._primary = Fernet(keys[0])
        self._all = MultiFernet([self._primary, *(Fernet(key) for key in keys[1:])])

    @classmethod
    def load(cls, data_dir: Path, environ: Mapping[str, str]) -> Keyring:
        """The keys of ``TRAINFLEET_SECRET_KEY`` in ``environ`` where set, else those of
        ``data_dir/secret.key`` (made with a new key when it does not exist)."""
        value = environ.get(KEY_VARIABLE, "")
        if value.strip():
            keys = [part.strip() for part in value.split(",") if part.strip()]
            return cls(_checked([key.encode() for key in keys], KEY_VARIABLE, "key"), KEY_VARIABLE)
        path = data_dir / KEY_FILE
        return cls(read_key_file(path, create=True), str(path))

    def encrypt(self, data: bytes) -> bytes:
        """``data`` encrypted with the primary key (a Fernet token)."""
        return self._all.encrypt(data)

    def decrypt(self, token: bytes) -> bytes:
        """The value of ``token``; VaultError when no key decrypts it."""
        try:
            return self._all.decrypt(token)
        except InvalidToken:
            raise self._undecryptable() from None

    def rotate(self, token: bytes) -> bytes:
        """``token``'s value encrypted again with the primary key; VaultError when no key
        decrypts it."""
        try:
            return self._all.rotate(token)
        except InvalidToken:
            raise self._undecryptable() from None

    def needs_rotation(self, token: bytes) -> bool:
        """Whether ``token`` is not encrypted with the primary key (its signature is
        checked; nothing is decrypted)."""
        try:
            self._primary.extract_timestamp(token)
        except InvalidToken:
            return True
        return False

    def _undecryptable(self) -> VaultError:
        if self.source == KEY_VARIABLE:
            changed = f"was {KEY_VARIABLE} changed without keeping the old key?"
        else:
            changed = f"was the key file {self.source} replaced without keeping the old key?"
        return VaultError(
            f"a stored secret cannot be decrypted with the keys given: {changed} "
            "(or the stored value is damaged)"
        )


def read_key_file(path: Path, create: bool = False) -> list[bytes]:
    """The keys in ``path``, one a line, the primary first; ``create``: make the file with
    one new key when it does not exist."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        if not create:
            raise VaultError(f"no key file {path}") from None
        try:
            _publish_new(path, Fernet.generate_key() + b"\n")
        except OSError as error:
            if error.errno in DISK_FULL:
                raise DiskFull(f"disk full: cannot make the key file {path}") from None
            raise VaultError(f"cannot make the key file {path}: {error.strerror}") from None
        text = path.read_bytes()
    lines = [line.strip() for line in text.splitlines()]
    return _checked([line for line in lines if line], str(path), "line")


def rotate_key_file(path: Path) -> None:
    """Put a new primary key first in the key file ``path``, keeping the others (a file
    that does not exist is made with the new key alone). Replaced atomically, 0600."""
    keys = read_key_file(path) if path.exists() else []
    text = b"".join(key + b"\n" for key in [Fernet.generate_key(), *keys])
    temporary = _write_new(path, text)
    try:
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    _sync_directory(path.parent)


def _checked(keys: list[bytes], source: str, unit: str) -> list[bytes]:
    """``keys``, each a valid Fernet key; else VaultError naming ``source`` and which one
    is not (never the key itself)."""
    for number, key in enumerate(keys, 1):
        try:
            Fernet(key)
        except (ValueError, TypeError):
            raise VaultError(
                f"{source}: {unit} {number} is not a Fernet key (32 url-safe base64-encoded "
                "bytes; make one with: python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())')"
            ) from None
    return keys


def _publish_new(path: Path, text: bytes) -> None:
    """Make ``path`` holding ``text`` unless it exists: readers never see it incomplete,
    and of two processes making it at once, both end up with the same file."""
    temporary = _write_new(path, text)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    _sync_directory(path.parent)


def _write_new(path: Path, text: bytes) -> Path:
    """A new file beside ``path`` holding ``text``, created 0600 (O_EXCL), synced."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    try:
        with open(descriptor, "wb") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def _sync_directory(folder: Path) -> None:
    """Make a new or renamed file of ``folder`` durable: a lost key loses every secret."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
