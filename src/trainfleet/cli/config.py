"""Where the CLI sends its commands: a server (URL and token), or the embedded engine.

Each setting comes from the first of: the ``--server`` and ``--ca-cert`` flags, the
environment (``TRAINFLEET_SERVER``, ``TRAINFLEET_TOKEN``, ``TRAINFLEET_CA_CERT``), the config
file ``$XDG_CONFIG_HOME/trainfleet/config.yaml`` (``~/.config/...``)::

    server: https://trainfleet.example.org
    token: 6Vd0...
    ca_cert: ca.pem        # the CA that signed the server's certificate (relative: to here)

The same file says where the embedded engine and the server run jobs (``backend``,
``slurm`` and ``container_runtime``, see ``trainfleet.spec.backends``); without it they run
here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainfleet.cli.errors import UserError

if TYPE_CHECKING:
    from trainfleet.spec.backends import BackendConfig

KEYS = ("server", "token", "ca_cert")
BACKEND_KEYS = ("backend", "slurm", "container_runtime")


@dataclass(frozen=True)
class Target:
    """A server and its token; ``server`` None means the embedded engine."""

    server: str | None = None
    token: str | None = None
    ca_cert: str | None = None
    """The CA certificate file to verify an HTTPS server with (None: the usual CAs)."""
    ca_source: str = "--ca-cert"
    """Where ``ca_cert`` was given, to name in errors."""


def config_path(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CONFIG_HOME/trainfleet/config.yaml``, ``~/.config`` when XDG_CONFIG_HOME is unset."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainfleet" / "config.yaml"


def resolve(
    flag: str | None, ca_flag: str | None, environ: Mapping[str, str] = os.environ
) -> Target:
    """The target from the flags (``--server``, ``--ca-cert``), then the environment, then
    the config file (if any)."""
    env_server = environ.get("TRAINFLEET_SERVER") or None
    env_token = environ.get("TRAINFLEET_TOKEN") or None
    if env_token is not None:
        _check_token(env_token, "TRAINFLEET_TOKEN")
    path = config_path(environ)
    file = _strings(read_config(path), path) if path.exists() else {}
    if env_token is None and "token" in file:
        _check_token(file["token"], f"{path}: token")
    ca_cert, ca_source = _ca_cert(ca_flag, environ, file, path)
    return Target(
        server=flag or env_server or file.get("server"),
        token=env_token or file.get("token"),
        ca_cert=ca_cert,
        ca_source=ca_source,
    )


def _ca_cert(
    flag: str | None, environ: Mapping[str, str], file: dict[str, str], path: Path
) -> tuple[str | None, str]:
    """The CA certificate file and where it was given; the config file's is relative to it."""
    if flag:
        return flag, "--ca-cert"
    if environ.get("TRAINFLEET_CA_CERT"):
        return environ["TRAINFLEET_CA_CERT"], "TRAINFLEET_CA_CERT"
    if "ca_cert" in file:
        return str(path.parent / Path(file["ca_cert"]).expanduser()), f"{path}: ca_cert"
    return None, "--ca-cert"


def backend_config(environ: Mapping[str, str] = os.environ) -> BackendConfig:
    """The config file's ``backend`` and ``slurm`` settings (the local backend without)."""
    from pydantic import ValidationError

    from trainfleet.spec.backends import BackendConfig

    path = config_path(environ)
    file = read_config(path) if path.exists() else {}
    try:
        return BackendConfig.model_validate({k: v for k, v in file.items() if k in BACKEND_KEYS})
    except ValidationError as error:
        problem = error.errors()[0]
        field = ".".join(str(part) for part in problem["loc"]) or "backend"
        raise UserError(f"{path}: {field}: {problem['msg']}") from None


def read_config(path: Path) -> dict[str, Any]:
    """The config file's settings; UserError naming the file (and line) when it is malformed."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise UserError(f"{where}: not valid YAML: {error.problem}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise UserError(f"{path}: cannot read the config file: {error}") from None
    if data is None:
        return {}
    allowed = (*KEYS, *BACKEND_KEYS)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping with keys among {', '.join(allowed)}")
    for key in data:
        if key not in allowed:
            raise UserError(f"{path}: unknown key {key!r} (allowed: {', '.join(allowed)})")
    return data


def _strings(settings: dict[str, Any], path: Path) -> dict[str, str]:
    """The server and token settings, each a non-empty string."""
    for key in KEYS:
        if key in settings and (not isinstance(settings[key], str) or not settings[key]):
            raise UserError(f"{path}: {key}: expected a non-empty string")
    return {key: settings[key] for key in KEYS if key in settings}


def _check_token(token: str, where: str) -> None:
    """UserError naming ``where`` unless ``token`` can travel in an HTTP header.

    Tokens are URL-safe ASCII; anything else is a mistake (a pasted quote, a stray space),
    and httpx would refuse it with a traceback.
    """
    bad = next((char for char in token if not "!" <= char <= "~"), None)
    if bad is not None:
        raise UserError(
            f"{where}: a token holds only printable ASCII characters, without spaces; "
            f"this one has {bad!r}"
        )
