"""Where the CLI sends its commands: a server (URL and token), or the embedded engine.

Each setting comes from the first of: the ``--server`` and ``--ca-cert`` flags, the
environment (``TRAINFLEET_SERVER``, ``TRAINFLEET_TOKEN``, ``TRAINFLEET_CA_CERT``), the config
file ``$XDG_CONFIG_HOME/trainfleet/config.yaml``; resolved with every other setting by
``trainfleet.control.settings``, where the file is described.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from trainfleet.control.settings import Settings
from trainfleet.control.settings import Target as Target

if TYPE_CHECKING:
    from trainfleet.spec.backends import BackendConfig


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/trainfleet/config.yaml``, ``~/.config`` when XDG_CONFIG_HOME is unset."""
    return Settings.resolve(environ).config_path


def resolve(
    flag: str | None, ca_flag: str | None, environ: Mapping[str, str] | None = None
) -> Target:
    """The target from the flags (``--server``, ``--ca-cert``), then the environment, then
    the config file (if any)."""
    return Settings.resolve(environ, server=flag, ca_cert=ca_flag).target()


def backend_config(environ: Mapping[str, str] | None = None) -> BackendConfig:
    """The config file's ``backend`` and ``slurm`` settings (the local backend without)."""
    return Settings.resolve(environ).backend_config()
