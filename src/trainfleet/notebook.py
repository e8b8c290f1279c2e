"""``%load_ext trainfleet.notebook``: a notebook cell as a distributed job.

``%%trainfleet --workers 4 --framework pytorch`` runs the cell's code in every task of a
job, as ``trainfleet.run`` runs a function: with the notebook's variables that the cell
uses (sent by value), the notebook's folder, the tasks' logs printed as they come, and the
value of the cell's last expression on rank 0 as the cell's own. On a server (``--server``,
else ``TRAINFLEET_SERVER``, with ``TRAINFLEET_TOKEN``) through ``Client.run``; otherwise
on this machine's engine.
"""

from __future__ import annotations

import argparse
import ast
import os
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from trainfleet.domain.errors import BadInput

HIDDEN = frozenset({"In", "Out", "get_ipython", "exit", "quit"})
"""The notebook's own names, never sent."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # a message, not SystemExit, in a notebook
        raise BadInput(f"%%trainfleet: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="%%trainfleet", add_help=False)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--framework", default="pytorch")
    parser.add_argument("--queue")
    parser.add_argument("--name")
    parser.add_argument("--cpu", type=float)
    parser.add_argument("--memory")
    parser.add_argument("--gpu", type=float)
    parser.add_argument("--pip", action="append", help="a requirement of an environment")
    parser.add_argument("--server", help="a trainfleet server (default: TRAINFLEET_SERVER)")
    parser.add_argument("--local", action="store_true", help="this machine's engine")
    return parser


def cell_function(code: str) -> Callable[..., Any]:
    """A function that runs ``code`` with the names it is given and returns the value of
    its last expression (None when it ends with a statement); sent by value."""
    ast.parse(code)  # a syntax error is the caller's, before anything is sent

    def cell(**names: Any) -> Any:
        import ast as syntax

        body = syntax.parse(code, "<cell>")
        last = body.body[-1] if body.body else None
        if isinstance(last, syntax.Expr):
            body.body.pop()
        namespace = {"__name__": "__main__", **names}
        exec(compile(body, "<cell>", "exec"), namespace)
        if not isinstance(last, syntax.Expr):
            return None
        return eval(compile(syntax.Expression(last.value), "<cell>", "eval"), namespace)

    return cell


def used_names(code: str, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook's variables that ``code`` reads (the notebook's own left out)."""
    read = {node.id for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Name)}
    return {
        name: namespace[name]
        for name in sorted(read)
        if name in namespace and name not in HIDDEN and not name.startswith("_")
    }


def run_cell(line: str, code: str, namespace: Mapping[str, Any]) -> Any:
    """``%%trainfleet LINE`` over ``code``: the value of its last expression on rank 0."""
    given = _parser().parse_args(shlex.split(line))
    resources = {
        key: value
        for key, value in (("cpu", given.cpu), ("memory", given.memory), ("gpu", given.gpu))
        if value is not None
    }
    options: dict[str, Any] = {"workers": given.workers, "framework": given.framework}
    options |= {"resources": resources} if resources else {}
    options |= {"environment": {"pip": given.pip}} if given.pip else {}
    options |= {key: getattr(given, key) for key in ("queue", "name") if getattr(given, key)}
    options.setdefault("name", "cell")
    function, names = cell_function(code), used_names(code, namespace)
    server = given.server or os.environ.get("TRAINFLEET_SERVER")
    if server and not given.local:
        from trainfleet.client import Client

        with Client(server, os.environ.get("TRAINFLEET_TOKEN")) as client:
            return client.run(function, kwargs=names, **options)
    from trainfleet.cli.functions import run

    return run(function, kwargs=names, **options)


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%trainfleet`` (IPython calls this on ``%load_ext trainfleet.notebook``)."""

    def trainfleet(line: str, cell: str) -> Any:
        return run_cell(line, cell, ipython.user_ns)

    ipython.register_magic_function(trainfleet, magic_kind="cell", magic_name="trainfleet")
