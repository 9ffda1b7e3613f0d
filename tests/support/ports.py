"""The port of a server a test starts on a port it chooses before the server binds it (a child
process, PostgreSQL, Synapse, HAProxy, the OpenID provider)."""

from __future__ import annotations

import random
import socket

#: The lowest port picked: clear of the well-known and registered ports most used.
LOWEST = 10_000


def _ephemeral_low() -> int:
    """Where the kernel's range of ports for outgoing connections begins."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as proc:
            return int(proc.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on now, for a server that binds it a moment later.

    It is picked at random below the kernel's ephemeral range. A port bound to 0 and released
    comes from that range, where an outgoing connection (a database pool, another test
    worker's client) may take it before the server binds it; below it only another test's
    pick could, and a random one among thousands makes that unlikely.
    """
    high = _ephemeral_low()
    picker = random.SystemRandom()
    if high - LOWEST >= 1_000:
        for _ in range(200):
            port = picker.randrange(LOWEST, high)
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as sock:  # an unusual range: the kernel's pick
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
