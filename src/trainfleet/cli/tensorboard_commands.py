"""``trainfleet tensorboard JOB...``: one TensorBoard over several jobs' event folders.

Embedded (the jobs' folders are on this machine): it runs ``tensorboard`` here, on
127.0.0.1, with ``--logdir_spec JOB:DIR,...`` (each job a run group named by its id).
Against a server, whose folders this machine does not see, it prints where the server
serves each job's own TensorBoard instead.
"""

from __future__ import annotations

import subprocess
import sys

import click

from trainfleet.cli.commands import reader_of
from trainfleet.cli.errors import UserError
from trainfleet.cli.options import Options


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB...")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port on 127.0.0.1 (0: a free one, printed).",
)
@click.pass_obj
def tensorboard(options: Options, job_ids: tuple[str, ...], port: int) -> None:
    """Open one TensorBoard over several jobs' event folders.

    Runs TensorBoard here over each JOB's `tensorboard:` logdir (a run group per job);
    against a server, prints where the server serves each job's own TensorBoard.
    """
    folders: dict[str, str] = {}
    with reader_of(options) as service:
        for job_id in dict.fromkeys(job_ids):
            folder = service.event_dir(job_id)
            if folder is not None:
                folders[job_id] = folder
                continue
            links = [link for link in service.links(job_id) if link.name == "tensorboard"]
            if not links:
                raise UserError(
                    f"job {job_id} has no TensorBoard: add `tensorboard: true` to its job file"
                )
            click.echo(f"{job_id}: {links[0].url} ({links[0].state})")
    if not folders:
        return
    spec = ",".join(f"{job_id}:{folder}" for job_id, folder in folders.items())
    argv = [sys.executable, "-m", "tensorboard.main", "--logdir_spec", spec]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    click.echo(f"trainfleet | TensorBoard of {', '.join(folders)} (Ctrl-C ends it)", err=True)
    try:
        done = subprocess.run(argv, check=False)
    except KeyboardInterrupt:
        return
    if done.returncode not in (0, -2, 130):
        raise UserError(
            "tensorboard did not run (pip install 'trainfleet[tensorboard]'?)", exit_code=1
        )
