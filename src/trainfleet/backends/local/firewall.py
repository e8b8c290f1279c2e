"""Other accounts kept off a job's ports on this machine (``trainfleet server --isolate-teams``).

Tasks share this machine's network, so any process here could connect to any task's
listening port. With teams isolated, each job's ports get one nftables rule in trainfleet's
own table (``inet trainfleet``, chain ``output``, hooked where this machine's own traffic
leaves): a connection attempt (a TCP SYN) to one of the job's ports on any address of this
machine (``fib daddr type local``: the loopback and the host's own addresses, IPv4 and IPv6)
from a socket whose owner (``meta skuid``) is neither the job's account nor root is answered
with a reset, so the caller sees "connection refused" at once.

- Root keeps access: the server and every task's supervisor run as root, and root could
  delete the rules anyway, so refusing it would protect nothing and could only break the
  server's own probes of its tasks.
- Only a connection's first packet is matched: a task's outgoing connection may take a port
  of another job's as its own source port (both come from the ephemeral range) before that
  job listens on it, and the replies to it must pass.
- Only TCP: the ports a job is given are TCP ports.
- Each rule's comment names its owner (a digest of the server's data directory) and its job:
  a restarted server takes its rules back (``reconcile``) and never touches another server's
  rules, nor any other table.

Rules are written as nft's JSON and passed on stdin: no shell, and nothing of a user's in
them but the job's id, a JSON string. Across machines (Slurm nodes) this is the cluster's
business.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import threading
from collections.abc import Collection, Iterable
from typing import Any

from trainfleet.domain.errors import Misconfigured

FAMILY = "inet"
TABLE = "trainfleet"
CHAIN = "output"
NFT_SECONDS = 30
"""Longest wait for one ``nft`` command (it takes milliseconds)."""

log = logging.getLogger("trainfleet.firewall")


class FirewallError(Misconfigured):
    """``nft`` refused a change: a job's ports cannot be guarded."""


class Firewall:
    """One rule per job in ``inet trainfleet``: only its account (and root) reach its ports.

    Thread-safe. Open it with ``Firewall.open``, which checks that ``nft`` works here.
    """

    def __init__(self, owner: str, nft: str) -> None:
        """``owner``: whose rules these are (the server's data directory); ``nft``: its path."""
        self.scope = hashlib.sha256(owner.encode()).hexdigest()[:12]
        self.nft = nft
        self._handles: dict[str, set[int]] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(cls, owner: str) -> Firewall:
        """The firewall of ``owner``, its table and chain made if missing; Misconfigured
        naming ``--isolate-teams`` where nft is missing or cannot change the rules here."""
        nft = shutil.which("nft")
        if nft is None:
            raise Misconfigured(
                "--isolate-teams: nft is missing (Debian package nftables): it keeps other "
                "teams off a task's ports"
            )
        firewall = cls(owner, nft)
        try:
            firewall._apply(firewall._base())
        except FirewallError as error:
            raise Misconfigured(f"--isolate-teams: {error}") from None
        return firewall

    @classmethod
    def clear(cls, owner: str) -> None:
        """Remove every rule of ``owner`` (left by its server when it isolated teams, now
        started without): nothing where nft is missing, may not list, or has no table."""
        nft = shutil.which("nft")
        if nft is None:
            return
        firewall = cls(owner, nft)
        try:
            left = [handle for _, handle in firewall._listed()]
        except FirewallError:
            return
        firewall._delete(left)

    def allow(self, job_id: str, uid: int, ports: Collection[int]) -> None:
        """Let only ``uid`` and root connect to ``ports`` here, in place of the job's
        earlier rule if any (the new rule is in place first). Raises FirewallError."""
        with self._lock:
            old = self._handles.pop(job_id, set())
            if ports:
                echoed = self._apply(
                    [*self._base(), {"add": {"rule": self._rule(job_id, uid, ports)}}]
                )
                self._handles[job_id] = {_added_handle(echoed)}
            self._delete(old)

    def remove(self, job_id: str) -> None:
        """The job has ended: its ports are open to all again (a failure is logged)."""
        with self._lock:
            self._delete(self._handles.pop(job_id, set()))

    def reconcile(self, live: Iterable[str]) -> None:
        """Keep the rules of the ``live`` jobs (one each), remove every other rule of this
        owner: those of jobs that ended while no server ran. Raises FirewallError."""
        live = set(live)
        with self._lock:
            self._apply(self._base())
            stale = []
            for job_id, handle in self._listed():
                held = self._handles.setdefault(job_id, {handle}) if job_id in live else set()
                if handle not in held:
                    stale.append(handle)
            for job_id in set(self._handles) - live:
                del self._handles[job_id]
            self._delete(stale)

    def _rule(self, job_id: str, uid: int, ports: Collection[int]) -> dict[str, Any]:
        return {
            **self._chain(),
            "comment": self._comment(job_id),
            "expr": [
                _match("==", {"payload": {"protocol": "tcp", "field": "dport"}}, _one_of(ports)),
                _match(
                    "==",
                    {"&": [{"payload": {"protocol": "tcp", "field": "flags"}}, ["syn", "ack"]]},
                    "syn",
                ),
                _match("==", {"fib": {"result": "type", "flags": ["daddr"]}}, "local"),
                _match("!=", {"meta": {"key": "skuid"}}, _one_of({0, uid})),
                {"reject": {"type": "tcp reset"}},
            ],
        }

    def _comment(self, job_id: str) -> str:
        return f"trainfleet {self.scope} {job_id}"

    def _listed(self) -> list[tuple[str, int]]:
        """(job id, handle) of this owner's rules, as nft lists them now."""
        listed = self._nft(["-j", "-a", "list", "chain", FAMILY, TABLE, CHAIN])
        prefix = self._comment("")
        rules = (item["rule"] for item in listed.get("nftables", []) if "rule" in item)
        return [
            (rule["comment"].removeprefix(prefix), rule["handle"])
            for rule in rules
            if rule.get("comment", "").startswith(prefix)
        ]

    def _delete(self, handles: Collection[int]) -> None:
        """Delete rules by handle; one already gone is no error, another failure is logged."""
        if not handles:
            return
        try:
            self._apply([{"delete": {"rule": {**self._chain(), "handle": h}}} for h in handles])
            return
        except FirewallError:
            pass  # one of them is gone (or the table): delete the others one by one
        for handle in handles:
            try:
                self._apply([{"delete": {"rule": {**self._chain(), "handle": handle}}}])
            except FirewallError as error:
                if "No such file or directory" not in str(error):
                    log.warning("could not remove a port rule: %s", error)

    def _base(self) -> list[dict[str, Any]]:
        """Commands making the table and its chain (nothing where they exist)."""
        chain = {"type": "filter", "hook": "output", "prio": 0, "policy": "accept"}
        return [
            {"add": {"table": {"family": FAMILY, "name": TABLE}}},
            {"add": {"chain": {"family": FAMILY, "table": TABLE, "name": CHAIN, **chain}}},
        ]

    @staticmethod
    def _chain() -> dict[str, str]:
        return {"family": FAMILY, "table": TABLE, "chain": CHAIN}

    def _apply(self, commands: list[dict[str, Any]]) -> dict[str, Any]:
        """Run ``commands`` as one atomic batch; what nft echoes back, handles included."""
        return self._nft(["-j", "-e", "-a", "-f", "-"], {"nftables": commands})

    def _nft(self, args: list[str], batch: dict[str, Any] | None = None) -> dict[str, Any]:
        text = json.dumps(batch) if batch is not None else None
        try:
            done = subprocess.run(
                [self.nft, *args],
                input=text,
                capture_output=True,
                text=True,
                timeout=NFT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise FirewallError(f"nft failed: {error}") from None
        if done.returncode != 0:
            words = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
            raise FirewallError(f"nft failed: {words}")
        return json.loads(done.stdout) if done.stdout.strip() else {}


def _match(op: str, left: dict[str, Any], right: object) -> dict[str, Any]:
    return {"match": {"op": op, "left": left, "right": right}}


def _one_of(values: Iterable[int]) -> int | dict[str, list[int]]:
    """One value, or an anonymous set of several."""
    ordered = sorted(set(values))
    return ordered[0] if len(ordered) == 1 else {"set": ordered}


def _added_handle(echoed: dict[str, Any]) -> int:
    """The handle nft gave the rule added last in an echoed batch."""
    rules = [item["add"]["rule"] for item in echoed["nftables"] if "rule" in item.get("add", {})]
    return int(rules[-1]["handle"])
