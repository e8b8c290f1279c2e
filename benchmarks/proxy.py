"""The proxy's added latency, in two parts (``--only tensorboard,jupyter``), each on its own
`trainfleet server` subprocess (`trainfleet --data-dir TMP server --port 0`, SQLite):

(tensorboard) one TensorBoard request (the scalar API of a job's TensorBoard,
          ``/data/plugin/scalars/scalars``) through the proxy at ``/jobs/<id>/tensorboard/``
          beside the same request straight to the TensorBoard task's port, alternating,
          over one keep-alive connection each (httpx). The job writes three scalars with
          torch's SummaryWriter and keeps running. Target: at most 5 ms added at p50.
(jupyter) a notebook job's JupyterLab (``notebook: {idle_timeout: 0}``): execute round
          trips (an ``execute_request`` sent over a kernel's WebSocket until its
          ``execute_reply`` and the kernel's ``idle`` are in) of ``1+1`` and of an
          expression whose result is ~100 KB of text, through the proxy at
          ``/notebooks/<id>/`` beside straight to Jupyter's port (with ``Authorization:
          token <Jupyter's token>``), alternating, each over a kernel WebSocket already
          open (one kernel a path and code: a kernel sends its output to every socket
          open on it), each socket's round trips 250 ms apart at least (see GAP); and the
          time to open a kernel's WebSocket (the handshake, which Jupyter answers once
          the kernel answers) both ways. Target: proxy/direct of the p50s at most 1.5.
          Peer: ``1+1`` back to back, each path in turn. The client offers
          permessage-deflate as browsers do; what each side agreed is in the figures.

Prints a table and writes the figures as JSON (default benchmarks/results/proxy.json); the
figures of a part not run this time are kept from that file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

from trainfleet.vault.service_tokens import notebook_token

HERE = Path(__file__).parent
PARTS = ("tensorboard", "jupyter")
WRITER = """\
import os, time
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(os.environ["TRAINFLEET_TENSORBOARD_DIR"])
for step in range(3):
    writer.add_scalar("loss", 1.0 / (step + 1), step)
writer.flush()
time.sleep(3600)
"""
PORT = ["--port", "0"]
SCALARS = "data/plugin/scalars/scalars?run=.&tag=loss"

NOTEBOOK_JOB = "name: bench-notebook\nnotebook: {{idle_timeout: 0}}\nenv: {{PATH: '{path}'}}\n"
TASK_PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"
"""The notebook's PATH: this Python's (which has jupyterlab) first."""
OUTPUT_BYTES = 100_000
SETUP = f"import base64, os\nblob = base64.b64encode(os.urandom({OUTPUT_BYTES * 3 // 4})).decode()"
"""Run once in each kernel: ~100 KB of text that deflate does not shrink to nothing."""
CODES = {"1+1": "1+1", "100 KB": "blob"}
"""The round trips timed, by name: the code run."""
TARGET_RATIO = 1.5
GAP = 0.25
"""Seconds at least from a socket's round trip to its next, as between a person's cells.
Jupyter's WebSocket (tornado) leaves Nagle's algorithm on: the second message of a round
trip waits for the ACK of the first, which Linux's receiver holds back (delayed ACK, up to
~40 ms) where it sent data within its ACK timeout of receiving some, a timeout that grows
up to the RTO (200 ms on loopback). Closer than that, round trips take ~40 ms more every
other time or every time, whichever the path (the back-to-back figure shows it): the p50s
would be Jupyter's and the kernel's TCP timers', not the proxy's."""
WARM_UP = 3
BACK_TO_BACK = 10


def _server(data_dir: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    """The server, its output in a file (a pipe nobody reads would block it)."""
    data_dir.mkdir(parents=True)
    log = data_dir.parent / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "trainfleet", "--data-dir", str(data_dir), "server", *PORT],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "TRAINFLEET_ADMIN_TOKEN": token},
        )
    found = _until(
        "the server", lambda: re.search(r"Uvicorn running on (http://\S+)", log.read_text())
    )
    return process, found.group(1)


def _until(what: str, check: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def _stop(process: subprocess.Popen[bytes], log: Path, failed: bool) -> None:
    """The server stopped; on a failure, its output's end on stderr."""
    process.terminate()
    process.wait(timeout=60)
    if failed and log.exists():
        print("\n".join(log.read_text().splitlines()[-40:]), file=sys.stderr)


def _submit(api: httpx.Client, job: str) -> str:
    submitted = api.post("/api/v1/jobs", content=job, headers={"Content-Type": "application/yaml"})
    submitted.raise_for_status()
    return str(submitted.json()["job"]["id"])


def _cancel(api: httpx.Client, job_id: str) -> None:
    """Cancel the job and wait for its end (its processes gone before the server goes)."""
    api.post(f"/api/v1/jobs/{job_id}/cancel")
    _until(
        f"job {job_id} to end",
        lambda: (
            api.get(f"/api/v1/jobs/{job_id}").json()["job"]["state"]
            in ("cancelled", "succeeded", "failed")
        ),
    )


def _running_service(api: httpx.Client, job_id: str) -> dict[str, Any] | None:
    services = api.get(f"/api/v1/jobs/{job_id}").json()["services"]
    return services[0] if services and services[0]["state"] == "running" else None


def _scalars(client: httpx.Client, url: str) -> bool:
    response = client.get(url)
    return response.status_code == 200 and len(response.json()) == 3


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _figures(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": statistics.median(values),
        "p95_ms": _percentile(values, 0.95),
        "p99_ms": _percentile(values, 0.99),
    }


def measure_tensorboard(requests: int) -> dict[str, Any]:
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="tf-proxy-") as folder:
        root = Path(folder)
        (root / "write.py").write_text(WRITER)
        process, url = _server(root / "data", token)
        auth = {"Authorization": f"Bearer {token}"}
        failed = True
        try:
            with httpx.Client(base_url=url, headers=auth, timeout=30) as api:
                command = f"{sys.executable} {root / 'write.py'}"
                job = (
                    f"name: bench\nroles:\n  worker: {{command: '{command}'}}\ntensorboard: true\n"
                )
                job_id = _submit(api, job)
                link = _until("TensorBoard", lambda: _running_service(api, job_id))
                proxied = f"{url}{link['path']}{SCALARS}"
                direct = f"http://{link['address']}{link['path']}{SCALARS}"
                with (
                    httpx.Client(headers=auth, timeout=30) as via,
                    httpx.Client(timeout=30) as straight,
                ):
                    _until("the scalars", lambda: _scalars(via, proxied))
                    timings: dict[str, list[float]] = {"direct": [], "proxy": []}
                    for _ in range(50):  # warm both paths
                        straight.get(direct), via.get(proxied)
                    for _ in range(requests):
                        for name, client, target in (
                            ("direct", straight, direct),
                            ("proxy", via, proxied),
                        ):
                            started = time.perf_counter()
                            response = client.get(target)
                            timings[name].append((time.perf_counter() - started) * 1000)
                            assert response.status_code == 200, response.text
                _cancel(api, job_id)
            failed = False
        finally:
            _stop(process, root / "server.log", failed)
    figures = {name: _figures(values) for name, values in timings.items()}
    added = figures["proxy"]["p50_ms"] - figures["direct"]["p50_ms"]
    return {"requests": requests, **figures, "added_p50_ms": added, "target_added_p50_ms": 5.0}


class Kernel:
    """A kernel's channels, open: execute requests over them (Jupyter's JSON messages)."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.session = uuid.uuid4().hex
        self.last = 0.0
        """When its last round trip ended (time.monotonic)."""

    def paced(self) -> Kernel:
        """Itself, once GAP has passed since its last round trip."""
        time.sleep(max(0.0, self.last + GAP - time.monotonic()))
        return self

    def execute(self, code: str, timeout: float = 60) -> str | None:
        """Run ``code``; its result as text (None without one) once the kernel has
        replied and is idle again."""
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": "execute_request",
            "username": "bench",
            "session": self.session,
            "version": "5.3",
        }
        content = {"code": code, "silent": False, "store_history": False}
        request = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
        self.socket.send(json.dumps({**request, "channel": "shell", "buffers": []}))
        result: str | None = None
        replied = idle = False
        deadline = time.monotonic() + timeout
        while not (replied and idle):
            message = json.loads(self.socket.recv(timeout=max(0.0, deadline - time.monotonic())))
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, body = message["msg_type"], message["content"]
            if kind == "execute_result":
                result = str(body["data"]["text/plain"])
            elif kind == "error":
                raise RuntimeError(f"{code!r}: {body['ename']}: {body['evalue']}")
            elif kind == "execute_reply":
                replied = True
            elif kind == "status" and body.get("execution_state") == "idle":
                idle = True
        self.last = time.monotonic()
        return result


def _jupyter_answers(client: httpx.Client, url: str) -> bool:
    response = client.get(url)
    if response.status_code not in (200, 503):
        raise SystemExit(f"{url}: {response.status_code} {response.text}")
    return response.status_code == 200


def _opener(url: str, headers: dict[str, str]) -> Callable[[], Any]:
    """Opens the kernel's WebSocket at ``url`` (to use with ``with``)."""
    return lambda: connect(url, additional_headers=headers, open_timeout=30, max_size=2**26)


def measure_jupyter(round_trips: int, opens: int) -> dict[str, Any]:
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="tf-proxy-") as folder:
        root = Path(folder)
        process, url = _server(root / "data", token)
        auth = {"Authorization": f"Bearer {token}"}
        failed = True
        try:
            with httpx.Client(base_url=url, headers=auth, timeout=30) as api:
                job_id = _submit(api, NOTEBOOK_JOB.format(path=TASK_PATH))
                link = _until("the notebook", lambda: _running_service(api, job_id))
                path = link["path"]
                _until("Jupyter", lambda: _jupyter_answers(api, f"{path}api/status"))
                jupyter = {"Authorization": f"token {notebook_token(root / 'data', job_id)}"}
                bases = {
                    "direct": (f"ws://{link['address']}{path}", jupyter),
                    "proxy": (f"{url.replace('http', 'ws', 1)}{path}", auth),
                }
                channels: dict[str, list[Callable[[], Any]]] = {name: [] for name in bases}
                for name, (base, headers) in bases.items():
                    for _ in CODES:
                        created = api.post(f"{path}api/kernels", json={})
                        created.raise_for_status()
                        kernel = created.json()["id"]
                        channels[name].append(
                            _opener(f"{base}api/kernels/{kernel}/channels", headers)
                        )
                figures = _jupyter_timings(channels, round_trips, opens)
                _cancel(api, job_id)
            failed = False
        finally:
            _stop(process, root / "server.log", failed)
    return figures


def _jupyter_timings(
    channels: dict[str, list[Callable[[], Any]]], round_trips: int, opens: int
) -> dict[str, Any]:
    """Round trips, both ways alternating (which goes first alternating too), each path's
    kernel of that code's GAP apart; a few back to back; then opens (the 1+1 kernels)."""
    names = list(channels)
    timings: dict[str, dict[str, list[float]]] = {code: {n: [] for n in names} for code in CODES}
    back_to_back: dict[str, list[float]] = {name: [] for name in names}
    output_chars = 0
    with contextlib.ExitStack() as stack:
        sockets = {
            name: [stack.enter_context(open_one()) for open_one in openers]
            for name, openers in channels.items()
        }
        extensions = {name: _extensions(opened[0]) for name, opened in sockets.items()}
        kernels = {name: [Kernel(socket) for socket in opened] for name, opened in sockets.items()}
        for kernel in (kernel for each in kernels.values() for kernel in each):
            kernel.execute(SETUP)
            for code in CODES.values():
                for _ in range(WARM_UP):
                    kernel.execute(code)
        for turn in range(round_trips):
            for index, (label, code) in enumerate(CODES.items()):
                for name in names if turn % 2 == 0 else names[::-1]:
                    kernel = kernels[name][index].paced()
                    started = time.perf_counter()
                    result = kernel.execute(code)
                    timings[label][name].append((time.perf_counter() - started) * 1000)
                    if label == "1+1" and result != "2":
                        raise RuntimeError(f"1+1 gave {result!r} ({name})")
                    if label != "1+1":
                        output_chars = len(result or "")
        for name in names:
            kernel = kernels[name][0].paced()
            for _ in range(BACK_TO_BACK):
                started = time.perf_counter()
                kernel.execute(CODES["1+1"])
                back_to_back[name].append((time.perf_counter() - started) * 1000)
    if output_chars < OUTPUT_BYTES:
        raise RuntimeError(f"the large output was {output_chars} characters")
    open_times: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(opens + 2):  # the first two unmeasured: warm-up
        for name in names if turn % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            with channels[name][0]():
                elapsed = (time.perf_counter() - started) * 1000
            if turn >= 2:
                open_times[name].append(elapsed)
    return {
        "round_trips": round_trips,
        "gap_ms": GAP * 1000,
        "opens": opens,
        "output_chars": output_chars,
        "websocket_extensions": extensions,
        "execute": {label: _compared(by_path) for label, by_path in timings.items()},
        "open": _compared(open_times),
        "target_ratio_p50": TARGET_RATIO,
        "back_to_back_1+1 (peer)": {
            "round_trips": BACK_TO_BACK,
            **_compared(back_to_back),
        },
    }


def _compared(by_path: dict[str, list[float]]) -> dict[str, Any]:
    row: dict[str, Any] = {name: _figures(values) for name, values in by_path.items()}
    row["ratio_p50"] = row["proxy"]["p50_ms"] / row["direct"]["p50_ms"]
    return row


def _extensions(socket: ClientConnection) -> str | None:
    """The WebSocket extensions the server agreed to (permessage-deflate or none)."""
    return socket.response.headers.get("Sec-WebSocket-Extensions") if socket.response else None


def tensorboard_table(results: dict[str, Any]) -> str:
    lines = [f"{'path':<8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}"]
    for name in ("direct", "proxy"):
        row = results[name]
        lines.append(f"{name:<8} {row['p50_ms']:>8.2f} {row['p95_ms']:>8.2f} {row['p99_ms']:>8.2f}")
    lines.append(
        f"added at p50: {results['added_p50_ms']:.2f} ms "
        f"(target <= {results['target_added_p50_ms']:g} ms), "
        f"{results['requests']} requests each"
    )
    return "\n".join(lines)


def jupyter_table(results: dict[str, Any]) -> str:
    target, execute = results["target_ratio_p50"], results["execute"].items()
    head = f"{'':<16} {'direct p50':>10} {'p95':>7} {'proxy p50':>10} {'p95':>7}"
    lines = [f"{head} {'proxy/direct p50':>17}  (ms)"]
    rows = [
        *[(f"execute {label}", row, f"(target <= {target:g})") for label, row in execute],
        ("open WebSocket", results["open"], "(no target)"),
        ("1+1 back to back", results["back_to_back_1+1 (peer)"], "(peer)"),
    ]
    for label, row, note in rows:
        direct, proxy = row["direct"], row["proxy"]
        lines.append(
            f"{label:<16} {direct['p50_ms']:>10.2f} {direct['p95_ms']:>7.2f} "
            f"{proxy['p50_ms']:>10.2f} {proxy['p95_ms']:>7.2f} {row['ratio_p50']:>17.2f}  {note}"
        )
    lines.append(
        f"{results['round_trips']} round trips each (a kernel's {results['gap_ms']:g} ms "
        f"apart at least), {results['opens']} opens; "
        f"large output {results['output_chars']} characters; "
        f"extensions {results['websocket_extensions']}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated parts")
    parser.add_argument("--requests", type=int, default=500, help="(tensorboard) each path")
    parser.add_argument("--round-trips", type=int, default=200, help="(jupyter) each code, path")
    parser.add_argument("--opens", type=int, default=30, help="(jupyter) WebSockets each path")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "proxy.json")
    args = parser.parse_args()
    only = [part.strip() for part in args.only.split(",") if part.strip()]
    if unknown := set(only) - set(PARTS):
        parser.error(f"--only: unknown parts {sorted(unknown)} (choose from {', '.join(PARTS)})")
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    results = {part: previous[part] for part in PARTS if part in previous and part not in only}
    if "tensorboard" in only:
        print("(tensorboard) ...", flush=True)
        results["tensorboard"] = measure_tensorboard(args.requests)
        print(tensorboard_table(results["tensorboard"]), flush=True)
    if "jupyter" in only:
        print("(jupyter) ...", flush=True)
        results["jupyter"] = measure_jupyter(args.round_trips, args.opens)
        print(jupyter_table(results["jupyter"]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({part: results[part] for part in PARTS if part in results}, indent=2)
    )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
