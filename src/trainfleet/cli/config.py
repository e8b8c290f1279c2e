"""Where the CLI sends its commands: a server (URL and token), or the embedded engine.

Each setting comes from the first of: the ``--server`` flag, the environment
(``TRAINFLEET_SERVER``, ``TRAINFLEET_TOKEN``), the config file
``$XDG_CONFIG_HOME/trainfleet/config.yaml`` (``~/.config/...``)::

    server: https://trainfleet.example.org
    token: 6Vd0...
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainfleet.cli.errors import UserError

KEYS = ("server", "token")


@dataclass(frozen=True)
class Target:
    """A server and its token; ``server`` None means the embedded engine."""

    server: str | None = None
    token: str | None = None


def config_path(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CONFIG_HOME/trainfleet/config.yaml``, ``~/.config`` when XDG_CONFIG_HOME is unset."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainfleet" / "config.yaml"


def resolve(flag: str | None, environ: Mapping[str, str] = os.environ) -> Target:
    """The target from the flag, then the environment, then the config file (if any)."""
    env_server = environ.get("TRAINFLEET_SERVER") or None
    env_token = environ.get("TRAINFLEET_TOKEN") or None
    path = config_path(environ)
    file = read_config(path) if path.exists() else {}
    return Target(
        server=flag or env_server or file.get("server"),
        token=env_token or file.get("token"),
    )


def read_config(path: Path) -> dict[str, str]:
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
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping with keys {' and '.join(KEYS)}")
    settings: dict[str, str] = {}
    for key, value in data.items():
        if key not in KEYS:
            raise UserError(f"{path}: unknown key {key!r} (allowed: {', '.join(KEYS)})")
        if not isinstance(value, str) or not value:
            raise UserError(f"{path}: {key}: expected a non-empty string")
        settings[key] = value
    return settings
