"""``flink-agents callbacks serve`` as a child process, for tests."""

from __future__ import annotations

import re
import select
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Tuple

ROOT = Path(__file__).resolve().parent.parent.parent
# The line the command prints once it listens: its port and its journal.
SERVE_LINE = re.compile(r"^serving callbacks on http://127\.0\.0\.1:(\d+) \(journal: (.+)\)$")


@contextmanager
def serve_command(*args: str, ready_s: float = 15) -> Iterator[Tuple[subprocess.Popen, "re.Match[str]"]]:
    """Start ``callbacks serve --port 0 *args``; yield the process and the
    match of its first line (``SERVE_LINE``: port, journal). Killed, and its
    pipes closed, on the way out if it still runs.

    Raises:
        AssertionError: It printed no line within ``ready_s``, or another one.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "flink_agents.cli.main", "callbacks", "serve", "--port", "0", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], ready_s)
        assert ready, f"the command printed nothing within {ready_s} s"
        line = process.stdout.readline().decode().rstrip("\n")
        match = SERVE_LINE.match(line)
        assert match, line
        yield process, match
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()
