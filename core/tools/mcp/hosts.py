"""Where Mercury may go for an MCP server: the one rule for every URL a server names.

An MCP server, and the metadata it points to, name URLs Mercury then fetches or sends people
to: its protected resource metadata, its authorization server and that server's endpoints.
Taken as given, such a URL would make Mercury request any host the server likes (server-side
request forgery). :func:`admits` admits only the server's own host and port, and the hosts
the operator listed in the server's ``allowed_hosts`` (``host`` for any port, ``host:port``
for one), over HTTPS, or HTTP on a loopback host.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

__all__ = ["admits", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def admits(url: str, *, server_url: str, allowed_hosts: Sequence[str]) -> bool:
    """Whether Mercury may fetch ``url``, named by the MCP server at ``server_url`` or its
    metadata: the server's own scheme, host and port, or a host ``allowed_hosts`` lists."""
    try:
        target, server = urlsplit(url), urlsplit(server_url)
        host = (target.hostname or "").lower()
        port = target.port or (443 if target.scheme == "https" else 80)
        server_port = server.port or (443 if server.scheme == "https" else 80)
    except ValueError:
        return False  # a port that isn't a number
    if not host or target.username is not None or target.password is not None:
        return False
    if target.scheme != "https" and not (target.scheme == "http" and is_loopback(host)):
        return False
    if (target.scheme, host, port) == (server.scheme, (server.hostname or "").lower(), server_port):
        return True
    return any(_allowed(entry) in {(host, None), (host, port)} for entry in allowed_hosts)


def _allowed(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` as (host, port or None)."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, int(rest[1:]) if rest[1:].isdigit() else None
    name, colon, port = entry.rpartition(":")
    if colon and name and ":" not in name and port.isdigit():
        return name, int(port)
    return entry, None
