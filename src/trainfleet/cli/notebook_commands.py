"""``trainfleet notebook start|list|stop``: JupyterLab as a job (``notebook:``).

A notebook is a job like any other: it waits in its queue for its resources, counts
against its team's quota, runs in the current folder (a copy on a server), and ends once
idle for ``--idle-timeout``. A server serves it to its owner at ``/notebooks/<id>/``,
signed in as in the dashboard; embedded, ``trainfleet ui`` does.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from trainfleet.cli.options import OUTPUT, Options

FLAGS = {
    ("name",): "--name",
    ("queue",): "--queue",
    ("image",): "--image",
    ("notebook", "idle_timeout"): "--idle-timeout",
    ("roles", "notebook", "resources", "gpu"): "--gpu",
    ("roles", "notebook", "resources", "cpu"): "--cpu",
    ("roles", "notebook", "resources", "memory"): "--memory",
    ("environment", "python"): "--python",
    ("environment", "pip"): "--pip",
    ("environment", "requirements"): "--requirements",
}
"""Where each flag lands in the job, to name the flag in a refusal."""

WAIT_SECONDS = 120.0
"""How long ``start`` waits for JupyterLab to run before it says where it is."""


@click.group()
def notebook() -> None:
    """Start, list and stop JupyterLab notebooks (jobs, admitted by queues like any)."""


@notebook.command()
@click.option("--name", default="notebook", show_default=True, help="The job's name.")
@click.option("--gpu", type=float, help="GPUs (whole, or a fraction below 1 of one).")
@click.option("--cpu", help="CPUs, e.g. 2 or 500m.")
@click.option("--memory", help="Memory, e.g. 8Gi.")
@click.option("--queue", help="The queue it waits in (default: default).")
@click.option("--image", help="A container image with JupyterLab (else this machine's Python).")
@click.option("--python", "python_version", help="Build an environment of this Python version.")
@click.option("--pip", "packages", multiple=True, help="A package of its environment (repeat).")
@click.option("--requirements", help="A requirements file for its environment.")
@click.option(
    "--idle-timeout",
    default="1h",
    show_default=True,
    help="Stop it after this long without kernel or terminal activity (0: never).",
)
@click.option("--no-wait", is_flag=True, help="Return once submitted, without waiting for it.")
@OUTPUT
@click.pass_obj
def start(options: Options, /, no_wait: bool, output: str, **flags: Any) -> None:
    """Start JupyterLab as a job in the current folder; print where it opens.

    With --python, --pip or --requirements its kernels run in an environment built for it
    (jupyterlab is added to it); else under this machine's Python (or the image's), which
    needs jupyterlab.
    """
    from trainfleet.cli import commands
    from trainfleet.cli.service import JobInput

    with commands.user_errors():
        spec = notebook_spec(flags)
    with commands.service_of(options) as service:
        record = service.submit(JobInput(spec=spec), detach=True)
        if output != "table":
            commands._show_job(record, output, record.id)
            return
        click.echo(record.id)
        if not no_wait:
            _wait_and_show(service, record.id)


def notebook_spec(flags: dict[str, Any]) -> Any:
    """The notebook job the flags describe; exit 2 naming the flag that is wrong."""
    from pydantic import ValidationError

    from trainfleet.cli.errors import UserError
    from trainfleet.spec.models import JobSpec

    resources = {key: flags[key] for key in ("gpu", "cpu", "memory") if flags[key] is not None}
    doc: dict[str, Any] = {
        "name": flags["name"],
        "notebook": {"idle_timeout": flags["idle_timeout"]},
        "roles": {"notebook": {"resources": resources}},
    }
    for key in ("queue", "image"):
        if flags[key] is not None:
            doc[key] = flags[key]
    packages = list(flags["packages"])
    if flags["python_version"] or packages or flags["requirements"]:
        if not any(_is_jupyterlab(package) for package in packages):
            packages.append("jupyterlab")
        environment: dict[str, Any] = {"pip": packages}
        if flags["python_version"]:
            environment["python"] = flags["python_version"]
        if flags["requirements"]:
            environment["requirements"] = flags["requirements"]
        doc["environment"] = environment
    try:
        return JobSpec.model_validate(doc)
    except ValidationError as error:
        first = error.errors()[0]
        where = tuple(str(part) for part in first["loc"])
        flag = next((f for path, f in FLAGS.items() if where[: len(path)] == path), None)
        name = flag or ".".join(where) or "the notebook"
        raise UserError(f"{name}: {first['msg'].removeprefix('Value error, ')}") from None


def _is_jupyterlab(requirement: str) -> bool:
    name = requirement.split(";")[0].strip().lower()
    for stop in "<>=!~[ @":
        name = name.split(stop)[0]
    return name == "jupyterlab"


def _wait_and_show(service: Any, job_id: str) -> None:
    """Wait until JupyterLab answers (or the job ends, or WAIT_SECONDS), then say where;
    why it waits, once, while its queue holds it."""
    from trainfleet.cli.remote import RemoteService

    deadline = time.monotonic() + WAIT_SECONDS
    said = ""
    while True:
        link = _link(service, job_id)
        job = service.get(job_id)
        if link is not None and link.state.value == "running" and _answers(service, link):
            break
        ended = job.state in ("succeeded", "failed", "cancelled")
        noted = job.waiting_code not in ("", "waiting-for-admission")  # not a mere instant
        if noted and job.waiting != said and not ended:
            said = job.waiting
            click.echo(f"waiting: {said}", err=True)
        if ended or time.monotonic() > deadline:
            why = job.waiting or job.reason
            click.echo(f"notebook {job_id} is {job.state}" + (f": {why}" if why else ""), err=True)
            sys.exit(1 if ended else 0)
        time.sleep(1.0)
    where = _url(service, link)
    if not isinstance(service, RemoteService):
        where += " of `trainfleet ui` (which opens the dashboard signed in)"
    click.echo(f"opens at {where}")


def _answers(service: Any, link: Any) -> bool:
    """Whether JupyterLab answers yet: through the server's proxy, or on its port here."""
    import socket

    from trainfleet.cli.remote import RemoteService

    if isinstance(service, RemoteService):
        return bool(service.call(lambda: service.client.service_answers(link.path)))
    host, _, port = link.address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except (OSError, ValueError):
        return False
    return True


def _link(service: Any, job_id: str) -> Any:
    return next((link for link in service.links(job_id) if link.name == "notebook"), None)


@notebook.command(name="list")
@OUTPUT
@click.pass_obj
def list_notebooks(options: Options, output: str) -> None:
    """List the notebooks you see, newest first, with where each opens."""
    from trainfleet.cli import commands
    from trainfleet.spec.notebook import LABEL

    with commands.reader_of(options) as service:
        jobs = service.find(state=None, name=None, user=None, labels={LABEL: "true"}, limit=200)
        rows = [(job, _url(service, _link(service, job.id))) for job in jobs]
    if output != "table":
        commands._dump([job.to_dict(exclude={"spec"}) | {"url": url} for job, url in rows], output)
        return
    from trainfleet.cli import tables

    tables.print_notebooks(rows)


def _url(service: Any, link: Any) -> str:
    """Where it opens: through a server, its proxy; embedded, its path in `trainfleet ui`
    (never the task's own port: Jupyter's token stays with the proxy)."""
    from trainfleet.cli.remote import RemoteService

    if link is None:
        return ""
    return f"{link.url}lab" if isinstance(service, RemoteService) else f"{link.path}lab"


@notebook.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB...")
@click.pass_obj
def stop(options: Options, job_ids: tuple[str, ...]) -> None:
    """Stop notebooks (their kernels with them): what is saved stays in their folder."""
    from trainfleet.cli import commands
    from trainfleet.cli.errors import UserError
    from trainfleet.spec.models import JobSpec

    with commands.service_of(options) as service:
        for job_id in dict.fromkeys(job_ids):
            if JobSpec.model_validate_json(service.get(job_id).spec).notebook is None:
                raise UserError(f"job {job_id} is not a notebook: `trainfleet stop {job_id}`")
            job = service.cancel(job_id)
            click.echo(f"notebook {job.id} {job.state}")
