"""A click group whose commands are imported only when one is run or its help is shown
(click's documented LazyGroup pattern), so ``trainfleet --help`` and each command load
no other command's modules."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from gettext import gettext as _
from typing import Any, NamedTuple

import click


class Lazy(NamedTuple):
    """Where a command is defined (``module:attribute``) and the short help ``--help`` shows
    of it without importing it (the first paragraph of its docstring, as click takes it)."""

    target: str
    help: str
    hidden: bool = False


class LazyGroup(click.Group):
    """A group of lazy commands (``lazy``: name -> Lazy) beside any defined in place."""

    def __init__(self, *args: Any, lazy: Mapping[str, Lazy], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            self.add_command(self._load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.NoSuchCommand as error:
            # click suggests among the commands loaded so far: suggest among every one
            every = self.list_commands(ctx)
            raise click.NoSuchCommand(error.command_name, possibilities=every, ctx=ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click does, with the lazy commands' short help from the table."""
        shown = [name for name in self.list_commands(ctx) if not self._hidden(name)]
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name in shown)
        rows = [(name, self._short_help(name, limit)) for name in shown]
        with formatter.section(_("Commands")):
            formatter.write_dl(rows)

    def _hidden(self, name: str) -> bool:
        if name in self.commands:
            return self.commands[name].hidden
        return self.lazy[name].hidden

    def _short_help(self, name: str, limit: int) -> str:
        if name in self.commands:
            return self.commands[name].get_short_help_str(limit)
        return click.Command(name, help=self.lazy[name].help).get_short_help_str(limit)

    def _load(self, name: str) -> click.Command:
        module, attribute = self.lazy[name].target.split(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy[name].target} is not a click command")
        return command
