"""An elastic job's rounds: read from the file its store writes as data a task could forge,
and the store's reading of torch's state, which never runs what it unpickles."""

from __future__ import annotations

import base64
import json
import os
import pickle
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from helpers import wait_for

from trainfleet.control.rounds import Round, RoundFollower, parse_round
from trainfleet.programs import RENDEZVOUS
from trainfleet.programs.rendezvous_store import decode_state
from trainfleet.spec.rendezvous import HISTORY_VARIABLE


def _line(round_: int, members: list[str]) -> str:
    return json.dumps({"at": 1.0, "round": round_, "world": len(members), "members": members})


def test_a_round_reads_back_and_names_its_members() -> None:
    parsed = parse_round(_line(4, ["node-a", "node-b"]))
    assert parsed == Round(4, 2, ("node-a", "node-b"))
    assert parsed.describe(3) == "world size 2 of 3 (round 4: node-a, node-b)"
    many = Round(1, 10, tuple(f"n{i}" for i in range(10))).describe(10)
    assert many.endswith("n7 and 2 more)"), many


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        "[1, 2]",
        '{"round": 1, "world": 3, "members": ["a"]}',  # world and members disagree
        '{"round": -1, "world": 1, "members": ["a"]}',
        '{"round": "1", "world": 1, "members": ["a"]}',
        '{"round": 1, "world": 0, "members": []}',
    ],
)
def test_what_is_not_a_round_is_skipped(line: str) -> None:
    assert parse_round(line) is None


def test_the_follower_reads_each_line_once_and_waits_for_a_whole_line(tmp_path: Path) -> None:
    (tmp_path / "rendezvous").mkdir()
    history = tmp_path / "rendezvous" / "rounds.jsonl"
    follower = RoundFollower(tmp_path, "rendezvous/rounds.jsonl")
    assert follower.new_rounds() == []  # no file yet
    history.write_text(_line(0, ["a", "b", "c"]) + "\n" + _line(1, ["a", "b"])[:10])
    assert [r.world for r in follower.new_rounds()] == [3]
    history.write_text(_line(0, ["a", "b", "c"]) + "\n" + _line(1, ["a", "b"]) + "\n")
    assert [r.world for r in follower.new_rounds()] == [2]
    assert follower.new_rounds() == []
    restarted = RoundFollower(tmp_path, "rendezvous/rounds.jsonl", seen=1)  # a new server
    assert [r.world for r in restarted.new_rounds()] == [2]


def test_the_follower_reads_no_link_a_task_put_in_place_of_the_file(tmp_path: Path) -> None:
    (tmp_path / "rendezvous").mkdir()
    secret = tmp_path / "secret"
    secret.write_text(_line(0, ["root-only"]) + "\n")
    os.symlink(secret, tmp_path / "rendezvous" / "rounds.jsonl")
    assert RoundFollower(tmp_path, "rendezvous/rounds.jsonl").new_rounds() == []


class _Runs:
    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, ("touch /tmp/trainfleet-unpickled",))


def test_the_store_reads_torchs_state_and_refuses_anything_that_would_run() -> None:
    """The state comes from a store anyone reaching its port may write: a pickle that would
    call a function is refused, not run."""
    forged = base64.b64encode(pickle.dumps({"round": _Runs()}))
    with pytest.raises(ValueError, match="unreadable rendezvous state"):
        decode_state(forged)
    assert not os.path.exists("/tmp/trainfleet-unpickled")
    with pytest.raises(ValueError):
        decode_state(b"not base64!")


def test_the_store_reads_torchs_own_state() -> None:
    dynamic = pytest.importorskip("torch.distributed.elastic.rendezvous.dynamic_rendezvous")
    state = dynamic._RendezvousState()
    state.round, state.complete = 2, True
    for pid in (11, 12):
        node = dynamic._NodeDesc("node-a", pid, 0)
        state.participants[node] = pid - 11
        state.last_heartbeats[node] = datetime.now(UTC)  # as torch keeps them
    assert decode_state(base64.b64encode(pickle.dumps(state))) == (2, True, ["node-a", "node-a"])


def test_the_store_says_a_forged_state_once_and_still_tells_the_next_round(
    tmp_path: Path,
) -> None:
    """The store program, on a real TCPStore: a task writes garbage in place of the state
    (said once in its log, not twice a second), then a complete round (told as usual)."""
    distributed = pytest.importorskip("torch.distributed")
    dynamic = pytest.importorskip("torch.distributed.elastic.rendezvous.dynamic_rendezvous")
    with socket.socket() as probe:  # a port free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    history = tmp_path / "rounds.jsonl"
    env = {
        **os.environ,
        "TRAINFLEET_PORT": str(port),
        "TRAINFLEET_JOB": "j1",
        HISTORY_VARIABLE: str(history),
    }
    store = subprocess.Popen(
        [sys.executable, str(RENDEZVOUS)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        client = distributed.TCPStore(
            "127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30)
        )
        client.set("torch.rendezvous.j1", b"forged, not base64 at all")
        time.sleep(2.5)  # about five looks
        state = dynamic._RendezvousState()
        state.round, state.complete = 1, True
        state.participants[dynamic._NodeDesc("node-a", 1, 0)] = 0
        client.set("torch.rendezvous.j1", base64.b64encode(pickle.dumps(state)))
        wait_for(history.exists, 30, "the round written")
    finally:
        store.terminate()
        out, err = store.communicate(timeout=30)
    assert err.decode().count("unreadable rendezvous state") == 1, err
    assert "round 1: world size 1 (node-a)" in out.decode(), out
    assert parse_round(history.read_text().splitlines()[0]) == Round(1, 1, ("node-a",))
