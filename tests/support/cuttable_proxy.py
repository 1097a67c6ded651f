"""A TCP proxy on 127.0.0.1 that a test can cut and restore: a network
outage between a store and its server, without stopping the shared server.

``cut()`` closes the listening socket and every proxied connection (the
client sees its connection drop, and new connects are refused); ``restore()``
listens again on the same port.
"""

from __future__ import annotations

import socket
import threading
from typing import List, Tuple

from tests.support.ports import free_port


class CuttableProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` until cut.

    Args:
        target: (host, port) of the server.
    """

    def __init__(self, target: Tuple[str, int]) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = []
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self.port = free_port()
        self.restore()

    def restore(self) -> None:
        """Listen (again) on ``port``."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        listener.settimeout(0.05)
        stopping = threading.Event()
        with self._lock:
            self._listener, self._stopping = listener, stopping
        threading.Thread(target=self._accept, args=(listener, stopping), daemon=True).start()

    def cut(self) -> None:
        """Stop listening and drop every proxied connection."""
        with self._lock:
            self._stopping.set()
            if self._listener is not None:
                self._listener.close()
                self._listener = None
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    close = cut

    def _accept(self, listener: socket.socket, stopping: threading.Event) -> None:
        while not stopping.is_set():
            try:
                client, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            with self._lock:
                if stopping.is_set():
                    _close(client)
                    _close(upstream)
                    return
                self._sockets += [client, upstream]
            threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass  # the other direction or cut() closed it: the connection is over
    _close(source)
    _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected (any more)
    sock.close()
