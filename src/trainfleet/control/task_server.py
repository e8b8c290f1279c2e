"""Where a server's own tasks reach it: the URL a notebook's ``Client()`` is given
(``backends.launch.ServerAccess``), from the address the server listens on, whether it
serves HTTPS, and where its tasks run; on Kubernetes, ``kubernetes.server_url``, the
address its Pods already fetch their job's folder from.
"""

from __future__ import annotations

import ipaddress
import socket

WILDCARDS = {"", "0.0.0.0", "::"}
"""Hosts that mean every address of this machine."""


def url_for_tasks(
    host: str, port: int, https: bool, tasks_here: bool, cluster_url: str | None = None
) -> str | None:
    """The URL at which a server listening on ``host``:``port`` is reached by its tasks;
    None where they cannot be told one (a port the system picks, or a server on loopback
    whose tasks run on other machines).

    ``tasks_here``: they run on this machine (else on a cluster's nodes); ``cluster_url``:
    the address the cluster's Pods reach the server at, used as it is. Listening on every
    address, tasks here use loopback over HTTP, and this machine's name over HTTPS (which
    the certificate names) or from other machines.

    >>> url_for_tasks("0.0.0.0", 8080, False, True)
    'http://127.0.0.1:8080'
    >>> url_for_tasks("::1", 8443, True, True)
    'https://[::1]:8443'
    >>> url_for_tasks("127.0.0.1", 8080, False, False) is None
    True
    """
    if cluster_url:
        return cluster_url.rstrip("/")
    if port == 0:
        return None
    if host in WILDCARDS:
        if tasks_here and not https:
            host = "::1" if host == "::" else "127.0.0.1"
        else:
            host = socket.getfqdn()
    elif not tasks_here and _loopback(host):
        return None
    where = f"[{host}]" if ":" in host else host
    return f"{'https' if https else 'http'}://{where}:{port}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
