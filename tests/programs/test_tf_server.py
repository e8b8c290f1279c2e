"""`trainfleet tf-server`: TF_CONFIG checks, and a real server that stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from trainfleet.programs.tf_server import TFConfigError, parse_tf_config

CLUSTER = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}


def tf_server(tf_config: str | None) -> subprocess.Popen[str]:
    env = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return subprocess.Popen(
        [sys.executable, "-m", "trainfleet", "tf-server"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_reads_the_task_of_a_kubeflow_tf_config() -> None:
    raw = json.dumps(
        {"cluster": CLUSTER, "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    )
    task = parse_tf_config(raw)
    assert (task.job_name, task.task_index, task.address) == ("worker", 1, "127.0.0.1:3")
    assert task.rpc_layer is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, "TF_CONFIG is not set"),
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        (json.dumps({"task": {"type": "ps", "index": 0}}), "no 'cluster'"),
        (
            json.dumps({"cluster": {"ps": "h:1"}, "task": {"type": "ps", "index": 0}}),
            "list of 'host:port'",
        ),
        (json.dumps({"cluster": CLUSTER}), "no 'task'"),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "client", "index": 0}}),
            "'client' is not in",
        ),
        (json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 2}}), "task index 2"),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "ps", "index": "0"}}),
            "must be an integer",
        ),
    ],
)
def test_bad_tf_config_is_named(raw: str | None, message: str) -> None:
    with pytest.raises(TFConfigError, match=message):
        parse_tf_config(raw)


def test_bad_tf_config_exits_2_with_one_line() -> None:
    process = tf_server(json.dumps({"cluster": CLUSTER, "task": {"type": "client", "index": 0}}))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    [line] = stderr.strip().splitlines()
    assert line == (
        "trainfleet tf-server: task type 'client' is not in the TF_CONFIG cluster "
        "(its jobs: ps, worker)"
    )


@pytest.mark.slow
def test_serves_until_sigterm() -> None:
    pytest.importorskip("tensorflow")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = tf_server(
        json.dumps({"cluster": {"ps": [f"127.0.0.1:{port}"]}, "task": {"type": "ps", "index": 0}})
    )
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
        assert (
            line.strip()
            == f"trainfleet tf-server: /job:ps/task:0 serving at grpc://127.0.0.1:{port}"
        )
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.communicate()
