"""One database connection per process, for the SQL journal stores.

PyFlink ships a store to its Python workers by pickling it, and workers may
fork: a connection must never cross either. Stores keep ``_connection``,
``_lock`` and ``_pid`` and inherit the lifecycle from here.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict

__all__ = ["ProcessLocalConnection"]


class ProcessLocalConnection:
    """Mixin: ``close``, pickling without the connection, and fork safety."""

    _connection: Any
    _lock: threading.Lock
    _pid: int

    def close(self) -> None:
        """Close this process's connection; a later call opens a new one."""
        self._forget_inherited()
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_lock"] = None
        state["_connection"] = None
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _set_aside(self, connection: Any) -> None:
        """What to do with the parent's connection in a forked child."""

    def _forget_inherited(self) -> None:
        """After ``os.fork``: set the parent's connection aside, take a new lock
        (the parent's may have been held at the fork)."""
        pid = os.getpid()
        if self._pid == pid:
            return
        if self._connection is not None:
            self._set_aside(self._connection)
        self._connection = None
        self._lock = threading.Lock()
        self._pid = pid
