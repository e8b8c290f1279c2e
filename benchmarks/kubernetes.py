"""Kubernetes benchmark: submit-to-all-tasks-running of a 4-task job through trainfleet, and
through ``kubectl apply`` of the same 4 Pods written by hand, in the same run on the same
cluster; and the restart of a failed task.

Each task's command writes the time it started (``date +%s.%N``) to a file of its own, in a
folder every Pod mounts (the cluster is this machine); a figure is the latest of those times
minus the time its submission began.

(trainfleet) ``Engine.submit`` of a job of 4 workers with the Kubernetes backend (what the
             server does for ``POST /api/v1/jobs``): admission, the controller, the nodes'
             room, the root ConfigMap, then one Pod per task, on the node and port chosen.
(kubectl)    peer: ``kubectl apply -f`` of the 4 equivalent Pods (hostNetwork, the same image
             and command, the folder as hostPath) in one file.
(restart)    task 0 fails at once on its first attempt: from its exit to the last task of the
             next attempt running. trainfleet restarts the job whole (``restart.policy:
             on-failure``, no backoff: new Pods), beside the kubelet restarting the failed
             container in place (a Pod of ``restartPolicy: OnFailure``, its first backoff 10 s
             by Kubernetes' own rule), for reference.

usage: python benchmarks/kubernetes.py [--runs 10] [--out FILE]
(start the local cluster with: export KUBECONFIG=$(bash scripts/k8s.sh start | tail -n1))
Prints a table and writes the figures as JSON (default benchmarks/results/kubernetes.json).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This file's folder is first on sys.path, where its name would hide the `kubernetes` client.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]

import yaml  # noqa: E402

from trainfleet.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from trainfleet.control.assembly import engine_at  # noqa: E402
from trainfleet.domain.records import State  # noqa: E402
from trainfleet.spec.backends import KubernetesConfig  # noqa: E402
from trainfleet.spec.models import JobSpec  # noqa: E402

TASKS = 4
IMAGE = "localhost/trainfleet/python:3.11"
STAMP = "date +%s.%N > {marks}/$INDEX"
FAIL_FIRST = (
    'if [ ! -e {marks}/failed ]; then if [ "$INDEX" = 0 ]; then '
    "date +%s.%N > {marks}/exit; touch {marks}/failed; exit 1; fi; fi; "
    "date +%s.%N > {marks}/$INDEX; sleep 600"
)
"""Task 0 of the first attempt writes its exit time and fails; every task of an attempt after
it writes its start and waits to be stopped (the others of the first attempt write theirs,
and later ones write over them)."""


def _latest_start(marks: Path, after: float = 0.0, timeout: float = 120) -> float:
    """The latest start time the tasks wrote (each after ``after``), once all have."""
    deadline = time.monotonic() + timeout
    while True:
        texts = [
            (marks / str(index)).read_text().strip() if (marks / str(index)).exists() else ""
            for index in range(TASKS)
        ]
        if all(texts) and min(map(float, texts)) > after:
            return max(map(float, texts))
        if time.monotonic() > deadline:
            raise RuntimeError(f"not every task started in {timeout}s: {texts}")
        time.sleep(0.01)


def _pods(name: str, marks: Path, command: str, restart: str = "Never") -> str:
    pods = []
    for index in range(TASKS):
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-{index}", "labels": {"bench": name}},
                "spec": {
                    "hostNetwork": True,
                    "restartPolicy": restart,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "task",
                            "image": IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", command],
                            "env": [{"name": "INDEX", "value": str(index)}],
                            "volumeMounts": [{"name": "marks", "mountPath": str(marks)}],
                        }
                    ],
                    "volumes": [{"name": "marks", "hostPath": {"path": str(marks)}}],
                },
            }
        )
    return yaml.safe_dump_all(pods)


class Bench:
    def __init__(self, root: Path, kubeconfig: str) -> None:
        self.root = root
        self.kubectl = [shutil.which("kubectl") or "kubectl", "--kubeconfig", kubeconfig]
        own = Path(kubeconfig).parent.parent / "bin" / "kubectl"
        if own.exists():  # scripts/k8s.sh's own, of the cluster's version
            self.kubectl[0] = str(own)
        config = KubernetesConfig(kubeconfig=kubeconfig, host_paths=True)
        self.engine = engine_at(root / "data", backend=KubernetesBackend(config))
        self.runs = 0
        self.tag = secrets.token_hex(3)  # Pods' names of this run only

    def _marks(self) -> Path:
        self.runs += 1
        marks = self.root / f"marks-{self.runs}"
        marks.mkdir()
        return marks

    def _job(self, marks: Path, command: str, **more: object) -> JobSpec:
        worker = {"replicas": TASKS, "image": IMAGE, "pull": "never"}
        command = "INDEX=$TRAINFLEET_INDEX; " + command.format(marks=marks)
        return JobSpec.model_validate(
            {
                "name": "bench",
                **more,
                "roles": {"worker": {**worker, "command": ["sh", "-c", command]}},
            }
        )

    def trainfleet(self) -> float:
        marks = self._marks()
        spec = self._job(marks, STAMP)
        began = time.time()
        job = self.engine.submit(spec, self.root, start=True)
        figure = _latest_start(marks) - began
        if self.engine.wait(job.id, timeout=120).state != State.SUCCEEDED:
            raise RuntimeError(f"job {job.id} did not succeed")
        return figure

    def by_hand(self) -> float:
        marks = self._marks()
        name = f"hand-{self.tag}-{self.runs}"
        manifest = _pods(name, marks, STAMP.format(marks=marks))
        began = time.time()
        self._kubectl("apply", "-f", "-", given=manifest)
        figure = _latest_start(marks) - began
        self._delete(name)
        return figure

    def restart_trainfleet(self) -> float:
        marks = self._marks()
        spec = self._job(
            marks, FAIL_FIRST, restart={"policy": "on-failure", "backoff": {"initial": 0}}
        )
        job = self.engine.submit(spec, self.root, start=True)
        exited = float(_wait_file(marks / "exit"))
        figure = _latest_start(marks, after=exited) - exited
        self.engine.cancel(job.id)
        self.engine.wait(job.id, timeout=120)
        return figure

    def restart_in_place(self) -> float:
        marks = self._marks()
        name = f"retry-{self.tag}-{self.runs}"
        manifest = _pods(name, marks, FAIL_FIRST.format(marks=marks), restart="OnFailure")
        self._kubectl("apply", "-f", "-", given=manifest)
        exited = float(_wait_file(marks / "exit"))
        deadline = time.monotonic() + 120  # only the failed container starts again
        while float(_wait_file(marks / "0")) <= exited:
            if time.monotonic() > deadline:
                raise RuntimeError("the failed container never started again")
            time.sleep(0.01)
        figure = float((marks / "0").read_text()) - exited
        self._delete(name)
        return figure

    def _kubectl(self, *args: str, given: str | None = None) -> None:
        done = subprocess.run([*self.kubectl, *args], input=given, text=True, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")

    def _delete(self, name: str) -> None:
        self._kubectl(
            "delete",
            "pods",
            "-l",
            f"bench={name}",
            "--grace-period=0",
            "--wait=false",
        )


def _wait_file(path: Path, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and (text := path.read_text().strip())):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} never written")
        time.sleep(0.01)
    return text


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_s": statistics.median(ordered),
        "mean_s": statistics.fmean(ordered),
        "min_s": ordered[0],
        "max_s": ordered[-1],
        "runs": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "kubernetes.json")
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not kubeconfig:
        parser.error("KUBECONFIG is not set (export KUBECONFIG=$(bash scripts/k8s.sh start))")
    samples: dict[str, list[float]] = {"trainfleet": [], "kubectl": []}
    restarts: dict[str, list[float]] = {"trainfleet": [], "in_place": []}
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-k8s-") as tmp:
        bench = Bench(Path(tmp), kubeconfig)
        bench.by_hand()  # warm-up
        for run in range(args.runs):
            ways = ("trainfleet", "kubectl") if run % 2 else ("kubectl", "trainfleet")
            for name in ways:
                samples[name].append(
                    bench.trainfleet() if name == "trainfleet" else bench.by_hand()
                )
            restarts["trainfleet"].append(bench.restart_trainfleet())
            if run < 3:  # the kubelet's own backoff (10 s) is most of it: a few suffice
                restarts["in_place"].append(bench.restart_in_place())
            print(f"run {run + 1}: " + "  ".join(f"{k} {v[-1]:.3f}s" for k, v in samples.items()))
            print("  restart: " + "  ".join(f"{k} {v[-1]:.3f}s" for k, v in restarts.items()))
        bench.engine.shutdown()
    figures = {name: _summary(values) for name, values in samples.items()}
    pairs = list(zip(samples["trainfleet"], samples["kubectl"], strict=True))
    results = {
        "tasks": TASKS,
        **figures,
        "paired_ratio_median": statistics.median(ours / theirs for ours, theirs in pairs),
        "median_ratio": figures["trainfleet"]["median_s"] / figures["kubectl"]["median_s"],
        "target_ratio": 1.2,
        "restart": {name: _summary(values) for name, values in restarts.items()},
    }
    print(f"\nsubmit-to-all-{TASKS}-tasks-running over {args.runs} runs:")
    for name, figure in figures.items():
        print(
            f"  {name:<10} median {figure['median_s']:.3f} s  mean {figure['mean_s']:.3f} s  "
            f"({figure['min_s']:.3f}..{figure['max_s']:.3f})"
        )
    print(
        f"  trainfleet/kubectl: paired median {results['paired_ratio_median']:.2f}, "
        f"ratio of medians {results['median_ratio']:.2f} (target <= 1.2)"
    )
    restart = results["restart"]
    print(
        f"  exit to next attempt running: trainfleet (new Pods) median "
        f"{restart['trainfleet']['median_s']:.3f} s; kubelet in place (OnFailure) median "
        f"{restart['in_place']['median_s']:.3f} s"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
