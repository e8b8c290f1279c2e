"""Workflow files (``kind: Workflow``): what they may say, and each mistake named with its
file, line and field."""

from __future__ import annotations

import re

import pytest

from trainfleet.spec.errors import SpecError
from trainfleet.spec.workflows import load_workflow_text

GOOD = """\
kind: Workflow
name: nightly
parameters: {data: /srv/data, epochs: 3}
on_failure: finish-possible
schedule: {cron: "0 3 * * *", timezone: Europe/Berlin, concurrency: forbid, catch_up: all}
steps:
  prepare:
    job: {roles: {worker: {command: "python prep.py --out %data%"}}}
  train:
    file: train.yaml
    needs: [prepare]
    retries: 2
    timeout: 2h
  evaluate:
    notebook: eval.ipynb
    parameters: {epochs: 3}
    needs: [train]
  alert:
    job: {roles: {worker: {command: "echo %input_path% failed"}}}
    needs: [train, evaluate]
    when: failure
"""


def _problem(text: str) -> str:
    with pytest.raises(SpecError) as raised:
        load_workflow_text(text, "flow.yaml")
    return str(raised.value)


def test_a_workflow_is_read_with_its_defaults_and_order() -> None:
    flow = load_workflow_text(GOOD, "flow.yaml")
    assert flow.order() == ["prepare", "train", "evaluate", "alert"]
    assert flow.steps["train"].timeout == 7200.0 and flow.steps["train"].when == "success"
    assert flow.schedule is not None and flow.schedule.max_catch_up == 10
    assert (flow.schedule.concurrency, flow.schedule.catch_up) == ("forbid", "all")
    assert flow.on_failure == "finish-possible"


def test_a_cycle_is_named_with_its_steps_and_line() -> None:
    text = GOOD.replace("needs: [prepare]", "needs: [prepare, alert]")
    said = _problem(text)
    assert "flow.yaml:" in said and "a cycle: " in said
    assert all(step in said for step in ("train", "evaluate", "alert"))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("needs: [prepare]", "needs: [prepar]"),
            r"flow.yaml:11: steps.train.needs\[0\]: no step 'prepar'",
        ),
        (
            ("needs: [prepare]", "needs: [train]"),
            r"flow.yaml:11: steps.train.needs\[0\]: a step needs itself",
        ),
        (
            ("--out %data%", "--out %date%"),
            r"flow.yaml:8: steps.prepare.job.roles.worker.command: %date% is no parameter "
            r"\(parameters: data, epochs\)",
        ),
        (
            ('"0 3 * * *"', '"0 25 * * *"'),
            r"flow.yaml:5: schedule.cron: .*'0 25 \* \* \*' is not a cron expression",
        ),
        (
            ('"0 3 * * *"', '"*/5 0 3 * * *"'),
            r"flow.yaml:5: schedule.cron: .*is not five fields \(minute hour day month weekday\)",
        ),
        (
            ("Europe/Berlin", "Mars/Olympus"),
            r"flow.yaml:5: schedule.timezone: .*'Mars/Olympus' is not a time zone",
        ),
        (
            ("file: train.yaml", "file: ../train.yaml"),
            r"flow.yaml:10: steps.train.file: .*inside the workflow's folder",
        ),
        (
            ("file: train.yaml", "file: train.yaml\n    notebook: x.ipynb"),
            r"steps.train: .*one of job, file or notebook \(it has file and notebook\)",
        ),
        (("when: failure", "when: sometimes"), r"flow.yaml:\d+: steps.alert.when: "),
        (("name: nightly", "name: Nightly"), r"flow.yaml:2: name: invalid name 'Nightly'"),
        (("retries: 2", "retries: -1"), r"flow.yaml:12: steps.train.retries: "),
        (("on_failure: finish-possible", "on_failure: stop"), r"flow.yaml:4: on_failure: "),
    ],
)
def test_each_mistake_is_named_with_its_file_line_and_field(
    change: tuple[str, str], expected: str
) -> None:
    said = _problem(GOOD.replace(*change))
    assert re.search(expected, said), said


def test_two_hundred_steps_in_a_chain_are_ordered() -> None:
    steps = "".join(
        f"  s{n}: {{job: {{roles: {{worker: {{command: 'true'}}}}}}"
        + (f", needs: [s{n - 1}]" if n else "")
        + "}\n"
        for n in reversed(range(200))
    )
    flow = load_workflow_text(f"kind: Workflow\nname: chain\nsteps:\n{steps}", "chain.yaml")
    assert flow.order() == [f"s{n}" for n in range(200)]


def test_a_workflow_given_as_a_job_says_how_it_runs() -> None:
    from trainfleet.spec.errors import SpecError
    from trainfleet.spec.loading import load_job_text

    with pytest.raises(SpecError) as raised:
        load_job_text(GOOD, "flow.yaml")
    assert str(raised.value) == (
        "flow.yaml:1: kind: a workflow, not a job: run it with `trainfleet workflow run "
        "flow.yaml` (here) or `trainfleet workflow submit flow.yaml` (on a server)"
    )
