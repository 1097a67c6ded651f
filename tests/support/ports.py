"""Ports for servers a test starts later, in a child process or in Flink.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the
ephemeral range, the same range every outgoing connection takes its source
port from. Between the probe and the moment Flink's REST endpoint, a chroma
server or PostgreSQL binds it, a test running beside this one may take it for
a connection of its own; CI saw exactly that ("Could not start rest endpoint
on any port in port range 40067"). Below the ephemeral range a port is only
ever taken by a listener that asks for it by number.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Tuple

__all__ = ["free_port"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
_LOWEST = 10000  # below: well-known and commonly configured ports


def _ephemeral_range() -> Tuple[int, int]:
    try:
        low, high = _RANGE_FILE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _LINUX_DEFAULT_EPHEMERAL


def free_port() -> int:
    """A TCP port nobody holds on 127.0.0.1 now, outside the kernel's
    ephemeral range, chosen at random so tests running side by side rarely
    pick the same one.

    Raises ``OSError`` when 200 random candidates are all taken.
    """
    low, _ = _ephemeral_range()
    candidates = random.SystemRandom()
    for _ in range(200):
        port = candidates.randrange(_LOWEST, max(low, _LOWEST + 1000))
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free TCP port on 127.0.0.1 between {_LOWEST} and {low}")
