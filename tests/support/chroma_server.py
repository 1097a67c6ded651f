"""A real Chroma server on 127.0.0.1 for tests: the ``chroma`` CLI that
``chromadb`` installs (``chroma run --path DIR --host 127.0.0.1 --port N``),
started on a free port and stopped at the end. It works offline.

``chroma_binary()`` is None when the CLI is not installed; tests skip then,
saying so.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Optional
from contextlib import contextmanager

from tests.support.ports import free_port

__all__ = ["ChromaServer", "chroma_binary", "chroma_server"]


def chroma_binary() -> Optional[str]:
    """The ``chroma`` CLI beside this interpreter, else on PATH, else None."""
    beside = Path(sys.executable).parent / "chroma"
    if beside.is_file():
        return str(beside)
    return shutil.which("chroma")


class ChromaServer:
    """A started server: ``host``, ``port``, ``path`` (its data directory), ``log`` (its output file)."""

    def __init__(self, process: subprocess.Popen, host: str, port: int, path: Path, log: Path) -> None:
        self.process = process
        self.host = host
        self.port = port
        self.path = path
        self.log = log

    def alive(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}/api/v2/heartbeat", timeout=1) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False


@contextmanager
def chroma_server(path: Path, startup_timeout_s: float = 60.0) -> Iterator[ChromaServer]:
    """Run ``chroma run`` on a free port of 127.0.0.1 with data in ``path``
    until the block ends (then terminate it, kill it after 10 s).

    Raises:
        FileNotFoundError: The ``chroma`` CLI is not installed.
        RuntimeError: The server did not answer its heartbeat in time, or
            exited (the message has its output).
    """
    binary = chroma_binary()
    if binary is None:
        raise FileNotFoundError("the 'chroma' CLI (installed by chromadb) is not found")
    path.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = path.parent / f"chroma-{port}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [binary, "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    server = ChromaServer(process, "127.0.0.1", port, path, log)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not server.alive():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"chroma server on port {port} did not start (exit code {process.poll()}): "
                    f"{log.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
