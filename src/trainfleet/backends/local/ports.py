"""Free TCP ports on this machine, never handed out twice by one process."""

from __future__ import annotations

import socket
import threading

_handed_out: set[int] = set()
_lock = threading.Lock()


def free_port() -> int:
    """A port that nothing listens on now, and that this process has not handed out before."""
    with _lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("", 0))
                port: int = probe.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port
