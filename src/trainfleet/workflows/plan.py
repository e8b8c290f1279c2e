"""What a run of a workflow does next, from its steps' states alone (no job, no clock).

A step waits until every step it needs has ended, then:
- ``when: success`` runs if they all succeeded, ``failure`` if one of them failed, ``always``
  either way; otherwise it is skipped (and so, in turn, are the steps that need it to
  succeed);
- after any step failed, ``on_failure`` says what else runs: ``finish-running`` lets the
  running steps end and starts only failure handlers (``when: failure`` or ``always``);
  ``cancel-all`` also stops the running steps (but those handlers); ``finish-possible``
  goes on with every step that does not need the failed one.

A failed step with retries left runs again before it counts as failed.

>>> from trainfleet.spec.workflows import load_workflow_text
>>> flow = load_workflow_text('''
... kind: Workflow
... name: f
... steps:
...   a: {job: {roles: {worker: {command: "true"}}}}
...   b: {job: {roles: {worker: {command: "true"}}}, needs: [a]}
...   c: {job: {roles: {worker: {command: "true"}}}, needs: [a], when: failure}
... ''')
>>> run = RunPlan(flow)
>>> run.next()
Actions(start=['a'], skip=[], stop=[])
>>> run.started("a"); run.ended("a", succeeded=True)
>>> run.next()
Actions(start=['b'], skip=['c'], stop=[])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainfleet.domain.workflow_records import StepState
from trainfleet.spec.workflows import WorkflowSpec

__all__ = ["Actions", "RunPlan", "StepState"]


@dataclass
class Actions:
    """What to do now: steps to start, to record as skipped, and to stop."""

    start: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)


class RunPlan:
    """The states of one run's steps, and what follows from them."""

    def __init__(
        self,
        spec: WorkflowSpec,
        states: dict[str, StepState] | None = None,
        tries: dict[str, int] | None = None,
    ) -> None:
        """A run at its start, or as stored (``states`` and ``tries`` by step)."""
        self.spec = spec
        self.order = spec.order()
        self.states = {name: StepState.WAITING for name in self.order} | (states or {})
        self.tries = dict.fromkeys(self.order, 0) | (tries or {})

    def started(self, step: str) -> None:
        self.states[step] = StepState.RUNNING
        self.tries[step] += 1

    def ended(self, step: str, *, succeeded: bool, stopped: bool = False) -> None:
        """A step's job ended; a failed one with retries left waits to run again."""
        if succeeded:
            self.states[step] = StepState.SUCCEEDED
        elif stopped:
            self.states[step] = StepState.CANCELLED
        elif self.tries[step] <= self.spec.steps[step].retries:
            self.states[step] = StepState.WAITING  # retried: the next ``next`` starts it
        else:
            self.states[step] = StepState.FAILED

    @property
    def failed(self) -> bool:
        return any(s in (StepState.FAILED, StepState.CANCELLED) for s in self.states.values())

    @property
    def done(self) -> bool:
        return all(state.is_final for state in self.states.values())

    def next(self) -> Actions:
        """The steps to start, skip and stop now; their states change as said, but for
        those started (``started`` once each has been)."""
        actions = Actions()
        policy = self.spec.on_failure
        if self.failed and policy == "cancel-all":  # but the failure's handlers
            actions.stop = [
                name
                for name in self.order
                if self.states[name] == StepState.RUNNING
                and self.spec.steps[name].when == "success"
            ]
        changed = True
        while changed:  # a skip may settle the steps after it
            changed = False
            for name in self.order:
                if self.states[name] != StepState.WAITING or name in actions.start:
                    continue
                verdict = self._verdict(name)
                if verdict == "skip":
                    self.states[name] = StepState.SKIPPED
                    actions.skip.append(name)
                    changed = True
                elif verdict == "start":
                    actions.start.append(name)
        return actions

    def _verdict(self, name: str) -> str:
        """``start``, ``skip`` or ``wait`` for a waiting step."""
        step = self.spec.steps[name]
        needed = [self.states[need] for need in step.needs]
        if not all(state.is_final for state in needed):
            return "wait"
        any_failed = any(s in (StepState.FAILED, StepState.CANCELLED) for s in needed)
        all_succeeded = all(state == StepState.SUCCEEDED for state in needed)
        wanted = {
            "success": all_succeeded,
            "failure": any_failed,
            "always": True,
        }[step.when]
        if not wanted:
            return "skip"
        handler = step.when in ("failure", "always")
        if self.failed and not handler and self.spec.on_failure != "finish-possible":
            return "skip"  # after a failure only the failure's handlers start
        return "start"
