"""Kubernetes log copies beside ``kubectl logs -f``, in the same run on the same cluster.

A Pod prints --lines numbered lines as fast as it can (``seq``), writes the time it ended
(``date +%s.%N``) to a file in a folder every Pod mounts (the cluster is this machine), and
waits to be stopped. A figure is the time the whole log was copied (its last line is in the
file) minus the time its Pod began printing.

(turns)     trainfleet's copy (``Engine.submit``, the Kubernetes backend): a log that brings
            more than ``CHATTY_LINES`` lines a second is read whole once a second.
(followed)  the same copy with that turned off (``CHATTY_LINES`` and ``FOLLOW_BYTES`` out of
            reach): the log is followed to its end, a line a frame, as before.
(kubectl)   peer: ``kubectl logs -f`` of a Pod of the same command, to a file, started once
            the Pod runs.

usage: python benchmarks/kubernetes_logs.py [--runs 3] [--lines 100000] [--out FILE]
(start the local cluster with: export KUBECONFIG=$(bash scripts/k8s.sh start | tail -n1))
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
# This file's folder is first on sys.path, where kubernetes.py would hide the client.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]

import yaml  # noqa: E402

from trainfleet.backends.kubernetes import logs  # noqa: E402
from trainfleet.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from trainfleet.control.assembly import engine_at  # noqa: E402
from trainfleet.spec.backends import KubernetesConfig  # noqa: E402
from trainfleet.spec.models import JobSpec  # noqa: E402

IMAGE = "localhost/trainfleet/python:3.11"
PADDING = "padding-0123456789-0123456789-0123456789"
COMMAND = (
    "date +%s.%N > {marks}/began; seq 1 {lines} | sed 's/$/ {padding}/'; "
    "date +%s.%N > {marks}/printed; sleep 600"
)
TIMEOUT = 300


class Bench:
    def __init__(self, root: Path, kubeconfig: str, lines: int) -> None:
        self.root = root
        self.lines = lines
        self.last = f"{lines} {PADDING}\n".encode()
        self.kubectl = [shutil.which("kubectl") or "kubectl", "--kubeconfig", kubeconfig]
        own = Path(kubeconfig).parent.parent / "bin" / "kubectl"
        if own.exists():  # scripts/k8s.sh's own, of the cluster's version
            self.kubectl[0] = str(own)
        config = KubernetesConfig(kubeconfig=kubeconfig, host_paths=True)
        self.engine = engine_at(root / "data", backend=KubernetesBackend(config))
        self.runs = 0
        self.tag = secrets.token_hex(3)

    def _marks(self) -> Path:
        self.runs += 1
        marks = self.root / f"marks-{self.runs}"
        marks.mkdir()
        return marks

    def _command(self, marks: Path) -> str:
        return COMMAND.format(marks=marks, lines=self.lines, padding=PADDING)

    def trainfleet(self, chatty_lines: int, follow_bytes: int) -> float:
        logs.CHATTY_LINES, logs.FOLLOW_BYTES = chatty_lines, follow_bytes
        marks = self._marks()
        worker = {"image": IMAGE, "pull": "never", "command": ["sh", "-c", self._command(marks)]}
        spec = JobSpec.model_validate({"name": "logs", "roles": {"worker": worker}})
        job = self.engine.submit(spec, self.root, start=True)
        copy = self.engine.log_path(job.id, "worker", 0)
        copied = _wait(lambda: _ends_with(copy, self.last))
        self._check(copy)
        self.engine.cancel(job.id)
        self.engine.wait(job.id, timeout=120)
        return copied - float(_read(marks / "began"))

    def by_kubectl(self) -> float:
        marks = self._marks()
        name = f"logs-{self.tag}-{self.runs}"
        self._kubectl("apply", "-f", "-", given=_pod(name, marks, self._command(marks)))
        self._kubectl("wait", "--for=condition=Ready", f"pod/{name}", f"--timeout={TIMEOUT}s")
        copy = self.root / f"{name}.log"
        with copy.open("wb") as out:
            follower = subprocess.Popen([*self.kubectl, "logs", "-f", name], stdout=out)
        try:
            copied = _wait(lambda: _ends_with(copy, self.last))
        finally:
            follower.kill()
            follower.wait()
        self._check(copy)
        self._kubectl("delete", "pod", name, "--grace-period=0", "--wait=false")
        return copied - float(_read(marks / "began"))

    def _check(self, copy: Path) -> None:
        numbers = [int(line.split()[0]) for line in copy.read_text().splitlines()]
        if numbers != list(range(1, self.lines + 1)):
            raise RuntimeError(f"{copy}: not every line, once, in order")

    def _kubectl(self, *args: str, given: str | None = None) -> None:
        done = subprocess.run([*self.kubectl, *args], input=given, text=True, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")


def _pod(name: str, marks: Path, command: str) -> str:
    container = {
        "name": "task",
        "image": IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
        "volumeMounts": [{"name": "marks", "mountPath": str(marks)}],
    }
    spec = {
        "hostNetwork": True,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [{"name": "marks", "hostPath": {"path": str(marks)}}],
    }
    return yaml.safe_dump(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    )


def _wait(done: object) -> float:
    """The time ``done()`` first held (polled every 10 ms)."""
    assert callable(done)
    deadline = time.monotonic() + TIMEOUT
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done in {TIMEOUT} s")
        time.sleep(0.01)
    return time.time()


def _ends_with(path: Path, tail: bytes) -> bool:
    """Whether the file ends with ``tail`` (its last bytes alone read: the poll must not
    cost the copy it watches)."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - len(tail)))
            return file.read() == tail
    except OSError:
        return False


def _read(path: Path) -> str:
    _wait(lambda: path.exists() and path.read_text().strip())
    return path.read_text().strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "kubernetes-logs.json")
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not kubeconfig:
        parser.error("KUBECONFIG is not set (export KUBECONFIG=$(bash scripts/k8s.sh start))")
    chatty, follow_bytes = logs.CHATTY_LINES, logs.FOLLOW_BYTES
    ways = {
        "turns": lambda bench: bench.trainfleet(chatty, follow_bytes),
        "followed": lambda bench: bench.trainfleet(10**12, 2**62),
        "kubectl": lambda bench: bench.by_kubectl(),
    }
    samples: dict[str, list[float]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory(prefix="trainfleet-bench-k8s-logs-") as tmp:
        bench = Bench(Path(tmp), kubeconfig, args.lines)
        for run in range(args.runs):
            order = list(ways) if run % 2 == 0 else list(reversed(ways))
            for name in order:
                samples[name].append(ways[name](bench))
            print(f"run {run + 1}: " + "  ".join(f"{k} {v[-1]:.2f}s" for k, v in samples.items()))
        bench.engine.shutdown()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    results = {
        "lines": args.lines,
        "runs": args.runs,
        "median_s": medians,
        "samples_s": samples,
        "lines_per_s": {name: args.lines / seconds for name, seconds in medians.items()},
        "turns_to_kubectl": medians["turns"] / medians["kubectl"],
        "followed_to_kubectl": medians["followed"] / medians["kubectl"],
    }
    print(f"\n{args.lines} lines, from the Pod's first to the last in the copy (median):")
    for name, seconds in medians.items():
        print(f"  {name:<9} {seconds:6.2f} s  {args.lines / seconds:8.0f} lines/s")
    print(
        f"  turns/kubectl {results['turns_to_kubectl']:.2f}, "
        f"followed/kubectl {results['followed_to_kubectl']:.2f}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
