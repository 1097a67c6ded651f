"""Which TCP addresses a process listens on, read from Linux's /proc (no
psutil here): the sockets among ``/proc/PID/fd`` that ``/proc/PID/net/tcp``
and ``tcp6`` list in state LISTEN."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import List, Set, Tuple

__all__ = ["listening_addresses"]

_LISTEN = "0A"


def _socket_inodes(pid: int) -> Set[str]:
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    # /proc prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, a Java socket's view of IPv4
    return str(mapped or address)


def listening_addresses(pid: int) -> List[Tuple[str, int]]:
    """``(address, port)`` of every TCP socket of ``pid`` in state LISTEN;
    ``0.0.0.0`` or ``::`` for a socket bound to every interface."""
    inodes = _socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _LISTEN and inode in inodes:
                address, port = local.split(":")
                found.append((_address(address), int(port, 16)))
    return found
