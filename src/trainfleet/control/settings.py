"""The installation's settings, resolved once: flags, then environment, then config file, then
defaults, each value knowing where it came from (``Setting.source`` and ``Setting.where``,
which errors name).

The config file is ``$XDG_CONFIG_HOME/trainfleet/config.yaml`` (``~/.config/...``)::

    server: https://trainfleet.example.org
    token: 6Vd0...
    ca_cert: ca.pem        # the CA that signed the server's certificate (relative: to here)

The same file says where the embedded engine and the server run jobs (``backend``,
``slurm`` and ``container_runtime``, see ``trainfleet.spec.backends``); without it they run
here.

Below the faces, nothing but this module reads ``os.environ``, besides what a task's own
environment is made of (``environments.task_base``). Values are kept as given and parsed
where they are used (``control.assembly``), so a bad one fails the command that needs it
only. Importing this module is cheap: YAML and pydantic load only when a file is read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainfleet.datadir.layout import DataDir
from trainfleet.domain.errors import BadInput

if TYPE_CHECKING:
    from trainfleet.spec.backends import BackendConfig

CLIENT_KEYS = ("server", "token", "ca_cert")
BACKEND_KEYS = ("backend", "slurm", "kubernetes", "container_runtime")


class Source(StrEnum):
    """Where a setting's value came from."""

    FLAG = "flag"
    ENV = "env"
    FILE = "file"
    DEFAULT = "default"


@dataclass(frozen=True)
class Setting:
    """One resolved value, and where it came from."""

    value: Any
    source: Source = Source.DEFAULT
    where: str = ""
    """The flag, variable or ``<file>: key`` it was given by, as errors name it."""

    @property
    def given(self) -> bool:
        return self.source is not Source.DEFAULT


@dataclass(frozen=True)
class Knob:
    """How one setting may be given."""

    flag: str | None = None
    env: str | None = None
    file: str | None = None
    empty_is_value: bool = False
    """An empty variable is a value (``TRAINFLEET_GPUS=``: no GPUs), not unset."""


KNOBS: dict[str, Knob] = {
    "data_dir": Knob("--data-dir", "TRAINFLEET_DATA_DIR"),
    "server": Knob("--server", "TRAINFLEET_SERVER", "server"),
    "token": Knob(None, "TRAINFLEET_TOKEN", "token"),
    "ca_cert": Knob("--ca-cert", "TRAINFLEET_CA_CERT", "ca_cert"),
    "database_url": Knob("--database-url", "TRAINFLEET_DATABASE_URL"),
    "database_url_file": Knob("--database-url-file"),
    "gpus": Knob(None, "TRAINFLEET_GPUS", empty_is_value=True),
    "resources": Knob(None, "TRAINFLEET_RESOURCES"),
    "log_cap": Knob("--log-cap", "TRAINFLEET_LOG_CAP"),
    "usage_interval": Knob("--usage-interval", "TRAINFLEET_USAGE_INTERVAL"),
    "gpu_sharing": Knob("--gpu-sharing", "TRAINFLEET_GPU_SHARING"),
    "environment_cache": Knob("--environment-cache", "TRAINFLEET_ENVIRONMENT_CACHE"),
    "task_python": Knob("--task-python", "TRAINFLEET_TASK_PYTHON"),
    "isolate_teams": Knob("--isolate-teams", "TRAINFLEET_ISOLATE_TEAMS"),
    "team_accounts": Knob("--team-account"),
    "admin_token": Knob(None, "TRAINFLEET_ADMIN_TOKEN"),
    "backend": Knob("--backend", "TRAINFLEET_BACKEND", "backend"),
    "slurm": Knob(file="slurm"),
    "kubernetes": Knob(file="kubernetes"),
    "container_runtime": Knob(file="container_runtime"),
}
"""Every setting below the faces. A face's own flags (``--host``, ``--max-body``) may be
given too (``Settings.resolve``), under the names it chooses."""


class SettingsError(BadInput):
    """A config file or setting that cannot be used as given (the CLI exits 2)."""


@dataclass(frozen=True)
class Target:
    """A server and its token; ``server`` None means the embedded engine."""

    server: str | None = None
    token: str | None = None
    ca_cert: str | None = None
    """The CA certificate file to verify an HTTPS server with (None: the usual CAs)."""
    ca_source: str = "--ca-cert"
    """Where ``ca_cert`` was given, to name in errors."""


@dataclass(frozen=True)
class Settings:
    """Every setting of one command, resolved once (``resolve``)."""

    values: Mapping[str, Setting]
    environ: Mapping[str, str] = field(repr=False, default_factory=dict)
    """The environment the settings were resolved from (for the file's and data's place)."""

    @classmethod
    def resolve(cls, environ: Mapping[str, str] | None = None, /, **flags: Any) -> Settings:
        """The settings from ``flags`` (None: not given; a ``Setting``: given, its source
        said, as by click's ``envvar``), the environment (``os.environ`` by default), then
        the defaults. The config file's keys are read on first use (``file``)."""
        environ = os.environ if environ is None else environ
        values = {
            name: _resolve(name, knob, flags.get(name), environ) for name, knob in KNOBS.items()
        }
        for name, given in flags.items():  # a face's own flags
            if name not in KNOBS:
                values[name] = _given(given, Knob(f"--{name.replace('_', '-')}"))
        return cls(values, dict(environ))

    def __getitem__(self, name: str) -> Setting:
        """The setting ``name``: given by a flag or the environment, else by the config
        file (read now, if it was not), else its default (None)."""
        setting = self.values.get(name) or Setting(None)
        key = KNOBS[name].file if name in KNOBS else None
        if setting.given or key is None or key not in self.file:
            return setting
        return Setting(self.file[key], Source.FILE, f"{self.config_path}: {key}")

    def value(self, name: str) -> Any:
        """The value of ``name`` (see ``__getitem__``), None where it was given nowhere."""
        return self[name].value

    def text(self, name: str) -> str | None:
        """The value of ``name`` as text, None where it was not given (or is empty)."""
        value = self.value(name)
        return str(value) if value not in (None, "") else None

    @property
    def data_dir(self) -> DataDir:
        """``--data-dir``, ``$TRAINFLEET_DATA_DIR``, else ``$XDG_DATA_HOME/trainfleet``
        (``~/.local/share``)."""
        given = self.text("data_dir")
        if given:
            return DataDir(Path(given).expanduser())
        xdg = self.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return DataDir(Path(xdg) / "trainfleet")

    @property
    def config_path(self) -> Path:
        """``$XDG_CONFIG_HOME/trainfleet/config.yaml``, ``~/.config`` without XDG_CONFIG_HOME."""
        return config_path(self.environ)

    @cached_property
    def file(self) -> dict[str, Any]:
        """The config file's keys, read once; {} without the file; SettingsError naming the
        file (and line) when it is malformed."""
        path = self.config_path
        return read_config(path) if path.exists() else {}

    def target(self) -> Target:
        """The server commands go to: flags (``--server``, ``--ca-cert``), then the
        environment, then the config file (its ``ca_cert`` relative to it)."""
        token = self.values["token"]
        if token.given:  # named before the file is read
            _check_token(token.value, token.where)
        _strings(self.file, self.config_path)
        token = self["token"]
        if token.source is Source.FILE:
            _check_token(token.value, token.where)
        ca_cert, where = self.ca_cert()
        return Target(self.text("server"), self.text("token"), ca_cert, where)

    def ca_cert(self) -> tuple[str | None, str]:
        """The CA certificate file that HTTPS servers are verified with (``--ca-cert``,
        TRAINFLEET_CA_CERT, then the config file's ``ca_cert``, relative to it), None for
        the usual CAs; and where it was given."""
        ca = self["ca_cert"]
        if ca.source is Source.FILE:
            _strings(self.file, self.config_path)
            return str(self.config_path.parent / Path(ca.value).expanduser()), ca.where
        return ca.value, ca.where

    def backend_config(self) -> BackendConfig:
        """The config file's ``backend``, ``slurm``, ``kubernetes`` and ``container_runtime``
        (the local backend without)."""
        from pydantic import ValidationError

        from trainfleet.spec.backends import BackendConfig

        keys = {key: self.value(key) for key in BACKEND_KEYS if key in self.file or self[key].given}
        try:
            return BackendConfig.model_validate(keys)
        except ValidationError as error:
            problem = error.errors()[0]
            name = ".".join(str(part) for part in problem["loc"]) or "backend"
            where = self[name].where if name == "backend" else f"{self.config_path}: {name}"
            raise SettingsError(f"{where}: {problem['msg']}") from None

    def database_url(self) -> str | None:
        """The database URL from ``--database-url`` (or TRAINFLEET_DATABASE_URL) or from
        the first line of ``--database-url-file``; SettingsError naming the option when it
        is unusable. A file or the environment keeps the password out of ``ps``."""
        given, file = self.text("database_url"), self.text("database_url_file")
        try:
            return database_url_of(given, file)
        except ValueError as error:
            raise SettingsError(str(error)) from None


def data_dir_of(given: str | os.PathLike[str] | None) -> DataDir:
    """The data directory: ``given`` (``--data-dir``), else as the environment says
    (``Settings.data_dir``)."""
    return Settings.resolve(data_dir=given).data_dir


def _resolve(name: str, knob: Knob, flag: Any, environ: Mapping[str, str]) -> Setting:
    """One setting: the flag, else the environment variable, else unset (the config file
    is read when a value of it is asked for, ``Settings.__getitem__``)."""
    if isinstance(flag, Setting):  # resolved by the face (click's ``envvar``)
        return flag
    if flag is not None and flag is not False and flag not in ("", ()):
        return _given(flag, knob)
    if knob.env is not None:
        value = environ.get(knob.env)
        if value is not None and (value or knob.empty_is_value):
            return Setting(value, Source.ENV, knob.env)
    return Setting(None, Source.DEFAULT, knob.flag or knob.env or name)


def _given(flag: Any, knob: Knob) -> Setting:
    return flag if isinstance(flag, Setting) else Setting(flag, Source.FLAG, knob.flag or "")


def config_path(environ: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/trainfleet/config.yaml``, ``~/.config`` when XDG_CONFIG_HOME is unset."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainfleet" / "config.yaml"


def read_config(path: Path) -> dict[str, Any]:
    """The config file's settings; SettingsError naming the file (and line) when it is
    malformed."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise SettingsError(f"{where}: not valid YAML: {error.problem}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise SettingsError(f"{path}: cannot read the config file: {error}") from None
    if data is None:
        return {}
    allowed = (*CLIENT_KEYS, *BACKEND_KEYS)
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping with keys among {', '.join(allowed)}")
    for key in data:
        if key not in allowed:
            raise SettingsError(f"{path}: unknown key {key!r} (allowed: {', '.join(allowed)})")
    return data


def database_url_of(given: str | None, file: str | None) -> str | None:
    """The URL ``given``, or the first line of ``file``; ValueError naming the option when
    it is unusable (both given, the file unreadable or empty)."""
    if file is None:
        return given
    if given is not None:
        raise ValueError(
            "--database-url-file: give the database URL once, not also with --database-url "
            "or TRAINFLEET_DATABASE_URL"
        )
    try:
        lines = Path(file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"--database-url-file: cannot read {file}: {error}") from None
    url = lines[0].strip() if lines else ""
    if not url:
        raise ValueError(f"--database-url-file: {file} is empty (its first line is the URL)")
    return url


def _strings(settings: dict[str, Any], path: Path) -> dict[str, str]:
    """The server and token settings, each a non-empty string."""
    for key in CLIENT_KEYS:
        if key in settings and (not isinstance(settings[key], str) or not settings[key]):
            raise SettingsError(f"{path}: {key}: expected a non-empty string")
    return {key: settings[key] for key in CLIENT_KEYS if key in settings}


def _check_token(token: str, where: str) -> None:
    """SettingsError naming ``where`` unless ``token`` can travel in an HTTP header.

    Tokens are URL-safe ASCII; anything else is a mistake (a pasted quote, a stray space),
    and httpx would refuse it with a traceback.
    """
    bad = next((char for char in token if not "!" <= char <= "~"), None)
    if bad is not None:
        raise SettingsError(
            f"{where}: a token holds only printable ASCII characters, without spaces; "
            f"this one has {bad!r}"
        )
