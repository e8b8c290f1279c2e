"""``trainfleet rendezvous-store``: the torch c10d store of an elastic PyTorch job.

torchrun's elastic agents meet in a c10d store. Left to torchrun, the agent of the first node
hosts it, and the whole group ends when that node is lost. trainfleet runs this program as
one more task of the job instead (role ``rendezvous``, on a port of the job), for the job's
whole life, and points every agent at it (``is_host=false``).

It runs under the job's own ``python3`` (the one with torch, found on the task's ``PATH``)
and needs nothing else: it is stdlib plus torch. It also follows the rendezvous and writes
each round it sees complete, with its world size and members, to ``$TRAINFLEET_RENDEZVOUS_LOG``
(one JSON object a line) for trainfleet to show.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import signal
import sys
import time
from datetime import timedelta

PROG = "trainfleet rendezvous-store"
EXIT_BAD_INPUT = 2
POLL_SECONDS = 0.5
MAX_STATE_BYTES = 4 * 1024 * 1024
LOG_VARIABLE = "TRAINFLEET_RENDEZVOUS_LOG"

_STATE_MODULE = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
_ALLOWED = {
    (_STATE_MODULE, "_RendezvousState"),
    (_STATE_MODULE, "_NodeDesc"),
    ("datetime", "datetime"),
    ("datetime", "timezone"),
    ("datetime", "timedelta"),
    ("builtins", "set"),
}


class _StateOnly(pickle.Unpickler):
    """Any task of the job (or anyone who reaches the port) may write the store: its state
    is read as the rendezvous's own classes and nothing else, never as code to run."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a rendezvous state")
        if module == _STATE_MODULE:
            return {"_RendezvousState": _RendezvousState, "_NodeDesc": _NodeDesc}[name]
        return super().find_class(module, name)  # type: ignore[no-any-return]


class _NodeDesc:
    """A member as the state pickles it (``addr``, ``pid``, ``local_id``); read only."""

    def __init__(self, addr: str = "", pid: int = 0, local_id: int = 0) -> None:
        self.addr, self.pid, self.local_id = addr, pid, local_id

    def __hash__(self) -> int:
        return hash((self.addr, self.pid, self.local_id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NodeDesc) and vars(self) == vars(other)


class _RendezvousState:
    """The part of torch's ``_RendezvousState`` read here."""

    def __init__(
        self,
        round: int = 0,
        complete: bool = False,
        participants: dict[_NodeDesc, int] | None = None,
    ) -> None:
        self.round, self.complete, self.participants = round, complete, participants or {}


def decode_state(value: bytes) -> tuple[int, bool, list[str]]:
    """The round, whether it is complete, and its members' addresses, from the text the
    c10d backend keeps (base64 of a pickled ``_RendezvousState``).

    Raises ValueError for anything else."""
    if len(value) > MAX_STATE_BYTES:
        raise ValueError("the rendezvous state is too large")
    try:
        state = _StateOnly(io.BytesIO(base64.b64decode(value, validate=True))).load()
        participants = state.participants
        members = sorted(str(node.addr) for node in participants)
        return int(state.round), bool(state.complete), members
    except Exception as error:  # a state this reader does not know: say so, keep serving
        raise ValueError(f"unreadable rendezvous state: {error}") from None


def _record(path: str | None, round_: int, members: list[str]) -> None:
    """Say the round in the task's log, and append it to the history at ``path``."""
    print(f"round {round_}: world size {len(members)} ({', '.join(members)})", flush=True)
    entry = {"at": time.time(), "round": round_, "world": len(members), "members": members}
    if path is None:
        return
    try:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")
    except OSError as error:
        print(f"{PROG}: cannot write {path}: {error}", file=sys.stderr, flush=True)


def follow(store: object, key: str, log_path: str | None) -> None:
    """Write each round that completes, until a stop signal ends the program."""
    seen: tuple[int, bool] | None = None
    said = ""
    while True:
        time.sleep(POLL_SECONDS)
        try:
            if not store.check([key]):  # type: ignore[attr-defined]
                continue
            round_, complete, members = decode_state(store.get(key))  # type: ignore[attr-defined]
        except ValueError as error:
            if str(error) != said:  # once, not twice a second for as long as it lasts
                said = str(error)
                print(f"{PROG}: {error}", file=sys.stderr, flush=True)
            continue
        said = ""
        if complete and seen != (round_, complete):
            _record(log_path, round_, members)
        seen = (round_, complete)


def main(argv: list[str] | None = None) -> int:
    del argv
    try:
        port = int(os.environ["TRAINFLEET_PORT"])
        run_id = os.environ["TRAINFLEET_JOB"]
    except (KeyError, ValueError):
        print(f"{PROG}: TRAINFLEET_PORT and TRAINFLEET_JOB must be set", file=sys.stderr)
        return EXIT_BAD_INPUT
    for number in (signal.SIGTERM, signal.SIGINT):  # ends at once, even in a sleep
        signal.signal(number, lambda number, _: sys.exit(0))
    try:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]
    except ImportError:
        print(
            f"{PROG}: {sys.executable} has no torch: the store runs under the python of "
            "the agents' command (or python3), which must have it",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    store = TCPStore(
        "127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
    )
    print(f"{PROG}: serving on port {port}", flush=True)
    follow(store, f"torch.rendezvous.{run_id}", os.environ.get(LOG_VARIABLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
