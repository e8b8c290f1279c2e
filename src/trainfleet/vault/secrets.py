"""Teams' secrets: made, listed and deleted by name; read back only to start a task.

A secret is a small set of named text values (``password``, ``token``), encrypted together
at rest (``vault.keys``). Jobs name them in ``env`` (``{secret: NAME, key: KEY}``); the
values reach only the task's environment or a private file at its start, and its log
shows them as ``***``. No answer, event or log line of trainfleet carries a value.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from trainfleet.domain.errors import BadInput, NotFound
from trainfleet.domain.records import SecretRecord
from trainfleet.spec.errors import SpecError
from trainfleet.spec.models import JobSpec
from trainfleet.spec.names import SECRET_NAME, secret_key
from trainfleet.store.database import Store
from trainfleet.vault.keys import KEY_FILE, KEY_VARIABLE, Keyring

MAX_BYTES = 64 << 10
"""Most bytes of values one secret holds: secrets are credentials, not data."""

Values = dict[tuple[str, str], str]
"""Values by (secret, key)."""


class KeySource:
    """The keyring, read again when the key file changes (a rotation needs no restart).

    ``environ``: where ``TRAINFLEET_SECRET_KEY`` may give the keys instead of the file (the
    settings' environment, ``control.settings``)."""

    def __init__(self, data_dir: Path, environ: Mapping[str, str]) -> None:
        self.data_dir, self.environ = data_dir, dict(environ)
        self._keyring: Keyring | None = None
        self._stamp: float | None = None

    def keyring(self) -> Keyring:
        stamp = self._file_stamp()
        if self._keyring is None or stamp != self._stamp:
            self._keyring, self._stamp = Keyring.load(self.data_dir, self.environ), stamp
        return self._keyring

    def _file_stamp(self) -> float | None:
        if self.environ.get(KEY_VARIABLE, "").strip():
            return None
        try:
            return (self.data_dir / KEY_FILE).stat().st_mtime
        except FileNotFoundError:
            return None


class Secrets:
    """Every team's secrets in ``store``, encrypted with ``keys``."""

    def __init__(self, store: Store, keys: KeySource) -> None:
        self.store, self.keys = store, keys

    def create(self, team: str, name: str, values: Mapping[str, str], user: str) -> SecretRecord:
        """Store a new secret; BadInput naming the field when a name, key or value cannot
        be used, StoreConflict when the team has a secret of that name."""
        _check(name, values)
        data = self.keys.keyring().encrypt(json.dumps(dict(values)).encode())
        record = SecretRecord(
            team=team,
            name=name,
            keys=sorted(values),
            data=data.decode(),
            user=user,
            created_at=time.time(),
        )
        self.store.secrets.add(record)
        return record

    def list(self, teams: Collection[str] | None) -> list[SecretRecord]:
        return self.store.secrets.list(teams)

    def get(self, team: str, name: str) -> SecretRecord:
        secret = self.store.secrets.get(team, name)
        if secret is None:
            raise NotFound(f"no secret {name!r} in team {team!r}")
        return secret

    def delete(self, team: str, name: str) -> None:
        if not self.store.secrets.delete(team, name):
            raise NotFound(f"no secret {name!r} in team {team!r}")

    def check(self, team: str, spec: JobSpec) -> None:
        """SpecError naming the field of each secret or key the job names that ``team``
        does not have."""
        problems = []
        for field, ref in spec.secret_refs():
            secret = self.store.secrets.get(team, ref.secret)
            if secret is None:
                message = f"no secret {ref.secret!r} in team {team!r} (see trainfleet secret list)"
            elif ref.key not in secret.keys:
                keys = ", ".join(secret.keys)
                message = f"secret {ref.secret!r} has no key {ref.key!r} (its keys: {keys})"
            else:
                continue
            problems.append(SpecError.one(message, field=field).problems[0])
        if problems:
            raise SpecError(problems)

    def values(self, team: str, spec: JobSpec) -> Values:
        """The values the job names, read now; SpecError if one is gone."""
        wanted = {(ref.secret, ref.key) for _, ref in spec.secret_refs()}
        if not wanted:
            return {}
        self.check(team, spec)
        keyring = self.keys.keyring()
        opened: dict[str, dict[str, str]] = {}
        for name in {secret for secret, _ in wanted}:
            record = self.get(team, name)
            opened[name] = json.loads(keyring.decrypt(record.data.encode()))
        return {(name, key): opened[name][key] for name, key in wanted}

    def rotate(self) -> int:
        """Encrypt again with the first key every secret that another key encrypted; how
        many were. Run after a new key was put first; then the old key may go."""
        keyring, rotated = self.keys.keyring(), 0
        for secret in self.store.secrets.list():
            if keyring.needs_rotation(secret.data.encode()):
                data = keyring.rotate(secret.data.encode()).decode()
                self.store.secrets.replace_data(secret.team, secret.name, data)
                rotated += 1
        return rotated


def _check(name: str, values: Mapping[str, str]) -> None:
    if not SECRET_NAME.match(name):
        raise BadInput(
            f"name: invalid secret name {name!r}: use lower-case letters, digits, '.' and '-'"
        )
    if not values:
        raise BadInput("data: a secret needs at least one KEY=VALUE")
    for key, value in values.items():
        try:
            secret_key(key)
        except ValueError as error:
            raise BadInput(f"data.{key}: {error}") from None
        if "\0" in value:
            raise BadInput(f"data.{key}: the value has a NUL character, which no task can get")
    if sum(len(key) + len(value.encode()) for key, value in values.items()) > MAX_BYTES:
        raise BadInput(f"data: a secret holds at most {MAX_BYTES >> 10} KiB")
