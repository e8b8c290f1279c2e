"""A 200-step DAG through ``RunPlan``: every step starts in the first round after its
needs have all ended (no later: the plan holds nothing back), runs or is skipped as its
``when`` says of its needs' ends, and the run ends with every step final."""

from __future__ import annotations

import random

import pytest

from trainfleet.spec.workflows import load_workflow_text
from trainfleet.workflows.plan import RunPlan, StepState

STEPS = 200
FAILED = (StepState.FAILED, StepState.CANCELLED)


def _flow(seed: int) -> tuple[str, set[str]]:
    """A random DAG of STEPS steps (each needs up to 3 earlier ones), and those that fail."""
    rng = random.Random(seed)
    lines = ["kind: Workflow", "name: big", "on_failure: finish-possible", "steps:"]
    failing = set()
    for n in range(STEPS):
        needs = sorted(rng.sample(range(n), min(n, rng.randint(0, 3))))
        when = rng.choice(["success", "success", "failure", "always"])
        listed = ", ".join(f"s{m}" for m in needs)
        lines.append(f"  s{n}: {{job: {{}}, needs: [{listed}], when: {when}}}")
        if rng.random() < 0.1:
            failing.add(f"s{n}")
    return "\n".join(lines) + "\n", failing


@pytest.mark.parametrize("seed", range(5))
def test_a_200_step_dag_runs_in_order_at_once_and_as_when_says(seed: int) -> None:
    text, failing = _flow(seed)
    spec = load_workflow_text(text)
    plan = RunPlan(spec)
    ended_in: dict[str, int] = {}  # the round after which each step had ended
    started_in: dict[str, int] = {}
    rounds = 0
    while not plan.done:
        rounds += 1
        actions = plan.next()
        for name in actions.skip:  # settled before this round's starts
            ended_in[name] = rounds - 1
        assert actions.stop == []
        for name in actions.start:
            plan.started(name)
            started_in[name] = rounds
        for name in actions.start:  # every job ends within its round
            plan.ended(name, succeeded=name not in failing)
            ended_in[name] = rounds
        assert rounds <= STEPS + 1, "the plan does not move on"
    for name, step in spec.steps.items():
        state = plan.states[name]
        needs = [plan.states[need] for need in step.needs]
        assert state.is_final
        ready = max((ended_in[need] for need in step.needs), default=0)
        if name in started_in:  # started the round after its needs all ended, no later
            assert started_in[name] == ready + 1, (name, started_in[name], ready)
        wanted = {
            "success": all(s == StepState.SUCCEEDED for s in needs),
            "failure": any(s in FAILED for s in needs),
            "always": True,
        }[step.when]
        if wanted:
            expected = StepState.FAILED if name in failing else StepState.SUCCEEDED
            assert state == expected, (name, step.when, needs, state)
        else:
            assert state == StepState.SKIPPED, (name, step.when, needs, state)
    assert set(started_in) | {n for n, s in plan.states.items() if s == StepState.SKIPPED} == set(
        spec.steps
    )
