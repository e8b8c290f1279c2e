"""``RunPlan``: which step starts, is skipped or stopped, from the steps' states alone."""

from __future__ import annotations

from trainfleet.spec.workflows import load_workflow_text
from trainfleet.workflows.plan import RunPlan, StepState

JOB = '{roles: {worker: {command: "true"}}}'


def _plan(steps: str, on_failure: str = "finish-running") -> RunPlan:
    text = f"kind: Workflow\nname: f\non_failure: {on_failure}\nsteps:\n{steps}"
    return RunPlan(load_workflow_text(text, "f.yaml"))


def _finish(plan: RunPlan, step: str, ok: bool) -> None:
    plan.started(step)
    plan.ended(step, succeeded=ok)


DIAMOND = f"""\
  a: {{job: {JOB}}}
  b: {{job: {JOB}, needs: [a]}}
  c: {{job: {JOB}, needs: [a]}}
  d: {{job: {JOB}, needs: [b, c]}}
  e: {{job: {JOB}}}
  handler: {{job: {JOB}, needs: [b], when: failure}}
  report: {{job: {JOB}, needs: [d], when: always}}
"""


def test_independent_steps_start_together_and_a_step_waits_for_all_its_needs() -> None:
    plan = _plan(DIAMOND)
    assert plan.next().start == ["a", "e"]
    for step in ("a", "e"):
        plan.started(step)
    assert plan.next().start == []
    plan.ended("a", succeeded=True)
    assert plan.next().start == ["b", "c"]
    for step in ("b", "c"):
        plan.started(step)
    plan.ended("b", succeeded=True)
    actions = plan.next()
    assert actions.start == [] and actions.skip == ["handler"]  # b succeeded: no handler
    plan.ended("c", succeeded=True)
    assert plan.next().start == ["d"]


def test_finish_running_starts_only_the_failures_handlers() -> None:
    plan = _plan(DIAMOND)
    plan.next()
    _finish(plan, "a", True)
    plan.next()
    plan.started("b")
    plan.started("c")
    plan.ended("b", succeeded=False)
    actions = plan.next()
    assert (actions.start, actions.skip, actions.stop) == (["handler"], ["e"], [])
    assert plan.states["c"] == StepState.RUNNING  # left to end; d waits for it
    plan.started("handler")
    plan.ended("c", succeeded=True)
    actions = plan.next()
    assert (actions.start, actions.skip) == (["report"], ["d"])  # d needs b to succeed


def test_cancel_all_stops_what_runs_and_finish_possible_goes_on_beside_the_failure() -> None:
    plan = _plan(DIAMOND, "cancel-all")
    plan.next()
    plan.started("a")
    plan.started("e")
    plan.ended("a", succeeded=False)
    actions = plan.next()
    assert actions.stop == ["e"]
    assert set(actions.skip) == {"b", "c", "d", "handler"} and actions.start == ["report"]

    possible = _plan(DIAMOND + f"  f: {{job: {JOB}, needs: [e]}}\n", "finish-possible")
    possible.next()
    possible.started("a")
    possible.started("e")
    possible.ended("a", succeeded=False)
    assert possible.next().start == ["report"]  # its need d was skipped: it runs always
    possible.started("report")
    possible.ended("e", succeeded=True)
    assert possible.next().start == ["f"]  # e's branch goes on


def test_a_failed_step_with_retries_runs_again_then_fails() -> None:
    plan = _plan(f"  a: {{job: {JOB}, retries: 2}}\n  b: {{job: {JOB}, needs: [a]}}\n")
    for _ in range(2):
        assert plan.next().start == ["a"]
        _finish(plan, "a", False)
        assert plan.states["a"] == StepState.WAITING
    assert plan.next().start == ["a"]
    _finish(plan, "a", False)
    assert plan.states["a"] == StepState.FAILED and plan.tries["a"] == 3
    assert plan.next().skip == ["b"]
    assert plan.done and plan.failed


def test_two_hundred_steps_run_in_order_with_every_when() -> None:
    """A wide, deep DAG: 20 layers of 10; each step needs the whole layer before it; in
    every layer one step is a failure handler and one runs always."""
    lines = []
    for layer in range(20):
        for n in range(10):
            needs = [f"s{layer - 1}-{m}" for m in range(10) if m < 8] if layer else []
            when = "failure" if n == 8 else "always" if n == 9 else "success"
            lines.append(f"  s{layer}-{n}: {{job: {JOB}, needs: {needs}, when: {when}}}\n")
    plan = _plan("".join(lines))
    started: list[str] = []
    while not plan.done:
        actions = plan.next()
        assert actions.start or actions.skip, plan.states
        for step in actions.start:
            _finish(plan, step, True)
            started.append(step)
    position = {step: number for number, step in enumerate(started)}
    for step, spec in plan.spec.steps.items():
        if step in position:
            assert all(position[need] < position[step] for need in spec.needs)
    assert len(started) == 180  # every failure handler skipped, all else ran
    assert all(plan.states[f"s{layer}-8"] == StepState.SKIPPED for layer in range(20))
    assert not plan.failed
