"""Which service a command talks to: ``EngineService`` (no server configured) or
``RemoteService`` (``--server``, ``TRAINFLEET_SERVER`` or the config file).

Each is imported only when chosen, so ``trainfleet run`` without a server never loads
httpx, and a read command without one opens the store alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainfleet.cli.options import Options
from trainfleet.cli.service import JobReader, JobService

if TYPE_CHECKING:
    from trainfleet.cli.remote import RemoteService
    from trainfleet.control.settings import Target


def target_of(options: Options) -> Target:
    """The server (URL, token, CA certificate) every command talks to: from the flags, the
    environment, then the config file (see ``trainfleet.cli.config``); none: embedded."""
    from trainfleet.cli.config import settings_of

    return settings_of(options).target()


def open_service(options: Options) -> JobService:
    """The service the configuration names (see ``trainfleet.cli.config``); the settings
    are resolved once, for both."""
    from trainfleet.cli.config import settings_of

    settings = settings_of(options)
    target = settings.target()
    if target.server is None:
        from trainfleet.cli.embedded import EngineService

        return EngineService.of(settings)
    from trainfleet.cli.remote import RemoteService

    return RemoteService(target)


def open_reader(options: Options) -> JobReader:
    """Like ``open_service``, for the read commands: embedded, only the store is opened."""
    from trainfleet.cli.config import settings_of

    settings = settings_of(options)
    target = settings.target()
    if target.server is None:
        from trainfleet.cli.reading import StoreReader

        if settings.file:
            settings.backend_config()  # a malformed file is named here too, as by the engine
        return StoreReader.open(options.data_dir)
    from trainfleet.cli.remote import RemoteService

    return RemoteService(target)


def open_remote(options: Options, what: str) -> RemoteService:
    """The configured server, for what only a server has; UserError saying ``what`` is on
    a server where none is configured."""
    from trainfleet.cli.errors import UserError
    from trainfleet.cli.remote import RemoteService

    target = target_of(options)
    if target.server is None:
        raise UserError(f"{what} on a server: give --server or set TRAINFLEET_SERVER")
    return RemoteService(target)


def embedded(options: Options) -> JobService:
    """The engine on this machine's data directory, whatever the configuration says."""
    from trainfleet.cli.config import settings_of
    from trainfleet.cli.embedded import EngineService

    return EngineService.of(settings_of(options))
