"""Processes below a process, read from Linux's /proc (no psutil here)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Dict, List

__all__ = ["child_processes", "descendants"]


def descendants(root: int) -> List[int]:
    """The live processes below process ``root`` (children, grandchildren,
    ...; zombies left out), from ``/proc/*/stat``."""
    children: Dict[int, List[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
        fields = text[text.rindex(")") + 2:].split()
        if fields[0] != "Z":
            children[int(fields[1])].append(int(stat.parent.name))
    found, stack = [], list(children[root])
    while stack:
        pid = stack.pop()
        stack += children[pid]
        found.append(pid)
    return found


def child_processes(pid: int, name: str) -> List[int]:
    """Processes below ``pid`` whose command is ``name`` (``java``)."""
    found = []
    for candidate in descendants(pid):
        try:
            if Path(f"/proc/{candidate}/comm").read_text().strip() == name:
                found.append(candidate)
        except OSError:
            continue
    return found
