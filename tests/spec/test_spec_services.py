"""``notebook:`` and ``quicklinks:`` on a job (and Submarine's ``--quicklink``): what they
add to the job, that a stored job reads back the same, and their errors at the field."""

from __future__ import annotations

from typing import Any

import pytest

from trainfleet.spec.errors import SpecError
from trainfleet.spec.loading import load_job_text
from trainfleet.spec.models import JobSpec
from trainfleet.spec.submarine import SubmarineArgs, from_submarine_args


def notebook(**more: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "nb", "notebook": True, **more})


def test_a_notebook_is_one_tracked_role_running_jupyterlab_under_the_jobs_python() -> None:
    spec = notebook(roles={"notebook": {"resources": {"gpu": 1}, "image": "lab:1"}})
    assert spec.notebook is not None and spec.notebook.idle_timeout == 3600
    assert spec.roles["notebook"].argv() == ["trainfleet", "notebook-serve"]
    assert spec.tracked_roles() == ["notebook"] and spec.service_roles() == frozenset()
    assert spec.image_of("notebook") == "lab:1"  # the user's Python: not a service's
    assert spec.roles["notebook"].restart_policy == "never"
    assert spec.labels == {"trainfleet/notebook": "true"}
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec
    in_environment = notebook(environment={"pip": ["jupyterlab"]})
    assert in_environment.environment_of("notebook") is not None
    assert notebook(notebook={"idle_timeout": "30m"}).notebook.idle_timeout == 1800  # type: ignore[union-attr]


def test_a_notebook_with_tensorboard_gets_both_roles() -> None:
    """With ``roles`` left out, the TensorBoard service's role joins the notebook's (it was
    refused as "a role 'tensorboard' of its own")."""
    spec = load_job_text("name: nb\nnotebook: true\ntensorboard: true\n").spec
    assert sorted(spec.roles) == ["notebook", "tensorboard"]
    assert spec.tracked_roles() == ["notebook"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "name: nb\nnotebook: true\nroles:\n  notebook: {command: bash}\n",
            "roles.notebook.command: a notebook job's role runs JupyterLab",
        ),
        (
            "name: nb\nnotebook: true\nroles:\n  notebook: {replicas: 2}\n",
            "roles.notebook.replicas: a notebook has one replica",
        ),
        (
            "name: nb\nnotebook: true\nroles:\n  worker: {command: x}\n",
            "notebook: a notebook job runs JupyterLab alone; role(s) worker",
        ),
        ("name: nb\nnotebook: {idle: 3}\n", "notebook.idle: unknown field"),
        ("name: nb\nnotebook: {idle_timeout: 2d}\n", "notebook.idle_timeout: '2d' is not a"),
        ("name: nb\nframework: pytorch\nnotebook: true\n", "notebook: a notebook job is of"),
    ],
)
def test_a_bad_notebook_is_refused_at_its_field(text: str, said: str) -> None:
    with pytest.raises(SpecError) as refused:
        load_job_text(text, "nb.yaml")
    assert said in str(refused.value)


def test_a_quicklink_gives_its_role_the_port_it_names() -> None:
    text = "name: q\nroles:\n  web: {command: serve, replicas: 2}\nquicklinks: {ui: http://web-1:8889}\n"
    spec = load_job_text(text, "q.yaml").spec
    assert spec.roles["web"].port == 8888  # replica 1 listens on port + 1
    assert (spec.quicklinks["ui"].role, spec.quicklinks["ui"].index) == ("web", 1)
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize(
    ("links", "said"),
    [
        ({"ui": "http://web-0:9000"}, "quicklinks.ui.port: replica 0 of role 'web' listens on"),
        ({"ui": "http://db-0:9000"}, "quicklinks.ui.role: the job has no role 'db'"),
        ({"ui": "http://web-2:7002"}, "quicklinks.ui.index: role 'web' has 1 replica(s)"),
        ({"ui": "https://web-0:7000"}, "is not http://ROLE-INDEX:PORT"),
        ({"Bad": "http://web-0:7000"}, "quicklink name 'Bad'"),
        ({"tensorboard": "http://web-0:7000"}, "is trainfleet's own service"),
        ({"ui": {"role": "web", "port": 0}}, "quicklinks.ui.port"),
    ],
)
def test_a_bad_quicklink_is_refused_at_its_field(links: dict[str, Any], said: str) -> None:
    doc = {"name": "q", "roles": {"web": {"command": "serve", "port": 7000}}, "quicklinks": links}
    with pytest.raises(ValueError, match=None) as refused:
        JobSpec.model_validate(doc)
    assert said in str(refused.value)


def test_submarine_quicklinks() -> None:
    args = SubmarineArgs(
        name="q", worker_launch_cmd="serve", quicklink=("ui=http://worker-0:8123",)
    )
    spec = from_submarine_args(args).spec
    assert spec.roles["worker"].port == 8123 and spec.quicklinks["ui"].port == 8123
    for bad, said in [
        ("ui", "--quicklink: expected NAME=http://ROLE-INDEX:PORT, got 'ui'"),
        ("ui=ftp://x", "'ftp://x' is not http://ROLE-INDEX:PORT"),
    ]:
        with pytest.raises(SpecError) as refused:
            from_submarine_args(SubmarineArgs(name="q", worker_launch_cmd="s", quicklink=(bad,)))
        assert said in str(refused.value)
    twice = ("ui=http://worker-0:1", "ui=http://worker-0:1")
    with pytest.raises(SpecError, match="'ui' given twice"):
        from_submarine_args(SubmarineArgs(name="q", worker_launch_cmd="s", quicklink=twice))
