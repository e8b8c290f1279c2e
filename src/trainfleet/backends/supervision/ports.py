"""Free TCP ports on this machine, each held by one job until the job ends.

A job's ports stay its own across a task's restart alone (every task's address is in the
others' environment; a job that restarts whole takes new ones, and so does one whose task,
restarting alone, finds its port taken by another program) and come free again when it
ends; a restarted server holds again
the ports of the jobs it adopts. Free ports are looked for in the ephemeral range, round
robin from where the last search stopped, so a port just given back (perhaps still in
TIME_WAIT) is the last to come round again. A port is free when a probe can bind it
without SO_REUSEADDR. Only where too few are, ports whose sole users are connections in
TIME_WAIT (a task that served connections leaves its port so for a minute) are handed
out too: a server socket with SO_REUSEADDR, as torch's, gRPC's and Python's own servers
set, binds them; the alternative would be a failed job.
"""

from __future__ import annotations

import random
import socket
import threading
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from cachetools import TTLCache, cached

if TYPE_CHECKING:
    from trainfleet.backends.api import Address
    from trainfleet.scheduling.placement import TaskKey
    from trainfleet.spec.models import JobSpec

Key = TypeVar("Key", bound=Hashable)

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
RESERVED_PORTS = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
DEFAULT_RANGE = (32768, 60999)  # Linux's own default, where /proc cannot be read
KERNEL_SECONDS = 1.0
"""How long the kernel's port settings, as read, are used before they are read again: a
burst takes ports for hundreds of jobs a second, and the two reads were most of each take."""


class NoFreePort(OSError):
    """Every port of the ephemeral range is held by a job or in use on this machine."""


class PortPool:
    """The ports this process has given to jobs; thread-safe, never blocks for long."""

    def __init__(self) -> None:
        self._held: dict[str, set[int]] = {}
        self._holders: Counter[int] = Counter()
        """How many owners hold each held port (a fixed port may be given twice): so that
        a search never gathers every job's ports (thousands) to skip them."""
        self._lock = threading.Lock()
        self._next: int | None = None

    def hold(self, owner: str, ports: Iterable[int]) -> None:
        """Count ``ports`` as ``owner``'s (fixed ports, or an adopted job's)."""
        with self._lock:
            self._add(owner, ports)

    def _add(self, owner: str, ports: Iterable[int]) -> None:
        mine = self._held.setdefault(owner, set())
        for port in ports:
            if port not in mine:
                mine.add(port)
                self._holders[port] += 1

    def take(self, owner: str, count: int) -> list[int]:
        """``count`` free ports for ``owner``; raises NoFreePort after one pass over the range,
        taking none."""
        with self._lock:
            taken: list[int] = []
            waiting: list[int] = []  # free but for connections in TIME_WAIT
            held = self._holders
            low, high = ephemeral_range()
            size = high - low + 1
            start = self._next if self._next is not None and low <= self._next <= high else None
            if start is None:
                start = random.randint(low, high)
            skip = reserved_ports()
            for step in range(size):
                if len(taken) == count:
                    break
                port = low + (start - low + step) % size
                if port in held or port in skip:
                    continue
                if _bindable(port):
                    taken.append(port)
                    self._next = low + (port - low + 1) % size
                elif len(waiting) < count and _bindable(port, reuse=True):
                    waiting.append(port)
            taken += waiting[: count - len(taken)]
            if len(taken) < count:
                raise NoFreePort(
                    f"no free port: {count} wanted, {len(taken)} of the {size} ports of the"
                    f" ephemeral range {low}-{high} free ({len(held)} held by jobs here)"
                )
            self._add(owner, taken)
            return taken

    def reserve(self, owner: str, fixed: Mapping[Key, int | None]) -> dict[Key, int]:
        """A port for every key: the fixed one where given, else a free one, all ``owner``'s."""
        wanted = [key for key, port in fixed.items() if port is None]
        free = iter(self.take(owner, len(wanted)) if wanted else [])
        ports = {key: port if port is not None else next(free) for key, port in fixed.items()}
        self.hold(owner, ports.values())
        return ports

    def release(self, owner: str) -> None:
        """``owner`` has ended: its ports may be given out again."""
        with self._lock:
            for port in self._held.pop(owner, ()):
                self._holders[port] -= 1
                if not self._holders[port]:
                    del self._holders[port]

    def held(self) -> set[int]:
        with self._lock:
            return set(self._holders)


PORTS = PortPool()
"""The ports of this process's jobs: one pool, whichever backend gives them out."""


class PooledAddresses:
    """``reserve``, ``hold`` and ``release`` of a backend whose tasks' ports come from
    this process's pool, on ``address_host`` ("" where each task learns its node)."""

    address_host = ""

    def reserve(self, job_id: str, spec: JobSpec) -> dict[TaskKey, Address]:
        from trainfleet.backends.api import Address
        from trainfleet.scheduling.placement import task_keys

        fixed = {}
        for role, index in task_keys(spec):
            first = spec.roles[role].port
            fixed[(role, index)] = None if first is None else first + index
        ports = PORTS.reserve(job_id, fixed)
        return {key: Address(self.address_host, port) for key, port in ports.items()}

    def hold(self, job_id: str, addresses: Mapping[TaskKey, Address]) -> None:
        PORTS.hold(job_id, (address.port for address in addresses.values()))

    def release(self, job_id: str) -> None:
        PORTS.release(job_id)

    def taken(self, address: Address) -> bool:
        """False: the tasks' nodes are not known to be this machine (see ``LocalBackend``)."""
        return False


def in_use(port: int) -> bool:
    """Whether a program of this machine holds ``port`` so that a server could not bind it
    (connections in TIME_WAIT alone do not count); False where no probe can be made."""
    try:
        return not _bindable(port, reuse=True)
    except OSError:  # no socket to probe with (too many files open): no one known to hold it
        return False


def free_port() -> int:
    """A free port that no job of this process holds, held by no one: for a port used at once
    (a test's server). A job's ports come from ``PORTS.take``."""
    port = PORTS.take("", 1)[0]
    PORTS.release("")
    return port


@cached(TTLCache(maxsize=1, ttl=KERNEL_SECONDS), lock=threading.Lock())
def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for ``bind(0)`` and outgoing connections."""
    try:
        low, high = (int(word) for word in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_RANGE
    return low, high


@cached(TTLCache(maxsize=1, ttl=KERNEL_SECONDS), lock=threading.Lock())
def reserved_ports() -> frozenset[int]:
    """Ports the administrator keeps out of the ephemeral range (``8080,9000-9010``)."""
    try:
        text = RESERVED_PORTS.read_text().strip()
    except OSError:
        return frozenset()
    found: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return frozenset(found)


def _bindable(port: int, reuse: bool = False) -> bool:
    """Whether a socket can bind ``port`` now; with ``reuse`` (SO_REUSEADDR), whether only
    connections in TIME_WAIT, or sockets that are bound with SO_REUSEADDR but do not
    listen, use it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        if reuse:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True
