"""Where the CLI sends its commands: a server (URL and token), or the embedded engine.

Each setting comes from the first of: the ``--server`` and ``--ca-cert`` flags, the
environment (``TRAINFLEET_SERVER``, ``TRAINFLEET_TOKEN``, ``TRAINFLEET_CA_CERT``), the config
file ``$XDG_CONFIG_HOME/trainfleet/config.yaml``; resolved once per command with every other
setting by ``trainfleet.control.settings``, where the file is described.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainfleet.control.settings import Settings

if TYPE_CHECKING:
    from trainfleet.cli.options import Options


def settings_of(options: Options) -> Settings:
    """Every setting of one command: its global flags, the environment, the config file."""
    return Settings.resolve(
        data_dir=options.data_dir,
        server=options.server,
        ca_cert=options.ca_cert,
        backend=options.backend,
    )
