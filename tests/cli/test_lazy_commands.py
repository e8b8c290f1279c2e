"""`trainfleet` imports a command's module only when that command is run or its help shown,
and its `--help` lists each command as the command itself would."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from trainfleet.cli.main import COMMANDS, cli


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_table_says_what_the_command_says(name: str) -> None:
    """The short help in COMMANDS is the first paragraph of the command's own help, so
    `--help` reads the same as if every command were loaded."""
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and command.name == name
    assert command.hidden == COMMANDS[name].hidden
    if not command.hidden:
        assert command.help is not None
        assert " ".join(COMMANDS[name].help.split()) == " ".join(
            command.help.partition("\n\n")[0].split()
        )
        for width in (45, 60, 200):
            lazy = click.Command(name, help=COMMANDS[name].help)
            assert lazy.get_short_help_str(width) == command.get_short_help_str(width)


def _commands_loaded_by(*args: str) -> list[str]:
    code = (
        "import sys\n"
        "from trainfleet.cli.main import cli\n"
        "try:\n"
        f"    cli({list(args)!r}, prog_name='trainfleet')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.endswith('_commands')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1].strip("[]").replace("'", "").split(", ")


def test_help_loads_no_command() -> None:
    assert _commands_loaded_by("--help") == [""]


def test_a_command_loads_its_own_module_alone() -> None:
    assert _commands_loaded_by("run", "--help") == ["trainfleet.cli.launch_commands"]
    assert _commands_loaded_by("queue", "list", "--help") == ["trainfleet.cli.queue_commands"]


def test_a_mistyped_command_gets_suggestions_among_every_command() -> None:
    """click suggests among the commands it has loaded: the group suggests among all."""
    done = CliRunner().invoke(cli, ["lsit"], prog_name="trainfleet")
    assert done.exit_code == 2
    assert "No such command 'lsit'. (Did you mean one of: 'list', 'submit'?)" in done.output
