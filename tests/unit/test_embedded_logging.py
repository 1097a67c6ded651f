"""Thread mode: Python's root logger follows the TaskManager's level when it
is pemja's DEBUG (``runtime.flink.embedded_logging``). Outside a JVM the
``_pemja`` module and pemja's handler are stood in for: a module of that
name and a handler class of pemja's name and module."""

from __future__ import annotations

import logging
import sys
import types
from typing import Iterator

import pytest

from flink_agents.runtime.flink.embedded_logging import PER_REQUEST_LOGGERS, match_flink_log_level


class _Slf4jRoot:
    def __init__(self, lowest: str) -> None:
        order = ["trace", "debug", "info", "warn", "error"]
        self._enabled = set(order[order.index(lowest):])

    def isDebugEnabled(self) -> bool:  # noqa: N802 (Java's names)
        return "debug" in self._enabled

    def isInfoEnabled(self) -> bool:  # noqa: N802
        return "info" in self._enabled

    def isWarnEnabled(self) -> bool:  # noqa: N802
        return "warn" in self._enabled

    def isErrorEnabled(self) -> bool:  # noqa: N802
        return "error" in self._enabled


def _pemja_handler() -> logging.Handler:
    kind = type("PythonLogHandler", (logging.Handler,), {"emit": lambda self, record: None})
    kind.__module__ = "pemja.logger"
    return kind()


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    logger = logging.getLogger()
    level, handlers = logger.level, [h for h in logger.handlers if not _is_pytests(h)]
    clients = {name: logging.getLogger(name).level for name in PER_REQUEST_LOGGERS}
    yield logger
    for name, client_level in clients.items():
        logging.getLogger(name).setLevel(client_level)
    logger.setLevel(level)
    # The tests replace the handler list; pytest's handlers of this phase are its own business.
    logger.handlers[:] = handlers + [h for h in logger.handlers if _is_pytests(h)]
    sys.modules.pop("_pemja", None)


def _is_pytests(handler: logging.Handler) -> bool:
    return type(handler).__module__.startswith("_pytest")


def _jvm_logging_at(lowest: str) -> None:
    fake = types.ModuleType("_pemja")
    factory = types.SimpleNamespace(getLogger=lambda name: _Slf4jRoot(lowest) if name == "ROOT" else None)
    fake.findClass = lambda name: factory if name == "org.slf4j.LoggerFactory" else None
    sys.modules["_pemja"] = fake


@pytest.mark.parametrize("java_level, python_level", [
    ("info", logging.INFO), ("warn", logging.WARNING), ("error", logging.ERROR),
])
def test_pemjas_debug_root_follows_the_taskmanagers_level(root, java_level, python_level) -> None:
    root.setLevel(logging.DEBUG)
    root.handlers[:] = [_pemja_handler()]  # as on a TaskManager (pytest's capture handlers out)
    _jvm_logging_at(java_level)
    assert match_flink_log_level() == python_level
    assert root.level == python_level
    assert not logging.getLogger("httpcore.http11").isEnabledFor(logging.DEBUG)


def test_a_taskmanager_logging_debug_keeps_python_at_debug(root) -> None:
    root.setLevel(logging.DEBUG)
    root.handlers[:] = [_pemja_handler()]
    _jvm_logging_at("debug")
    assert match_flink_log_level() is None
    assert root.level == logging.DEBUG


def test_a_root_logger_the_job_configured_is_left_alone(root) -> None:
    _jvm_logging_at("info")
    root.setLevel(logging.DEBUG)  # DEBUG, but no pemja handler: the job's own setting
    root.handlers[:] = [logging.NullHandler()]
    assert match_flink_log_level() is None
    assert root.level == logging.DEBUG
    root.handlers[:] = [_pemja_handler()]
    root.setLevel(logging.WARNING)  # pemja's handler, another level: set by the job
    assert match_flink_log_level() is None
    assert root.level == logging.WARNING
    root.setLevel(logging.DEBUG)
    root.addHandler(logging.NullHandler())  # a handler of the job's own beside pemja's: DEBUG is wanted
    assert match_flink_log_level() is None
    assert root.level == logging.DEBUG


def test_outside_a_taskmanager_nothing_changes(root) -> None:
    root.setLevel(logging.DEBUG)
    root.handlers[:] = [_pemja_handler()]
    assert "_pemja" not in sys.modules
    assert match_flink_log_level() is None
    assert root.level == logging.DEBUG


def _request_line_passes(name: str) -> bool:
    """Whether an HTTP client's per-request INFO line would be handled."""
    return logging.getLogger(name).isEnabledFor(logging.INFO)


def test_the_http_clients_request_lines_are_held_to_warning_unless_the_job_set_their_level(root) -> None:
    root.setLevel(logging.DEBUG)
    root.handlers[:] = [_pemja_handler()]
    _jvm_logging_at("info")
    for name in PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    logging.getLogger("httpx").setLevel(logging.INFO)  # the job wants httpx's lines
    assert match_flink_log_level() == logging.INFO
    assert not _request_line_passes("httpx2")  # openai's client: one line per model call, held back
    assert logging.getLogger("httpx2").isEnabledFor(logging.WARNING)
    assert _request_line_passes("httpx")  # the job's level stays
    assert logging.getLogger("flink_agents").isEnabledFor(logging.INFO)  # the rest logs at INFO


def test_a_job_that_configured_logging_keeps_the_request_lines(root) -> None:
    root.setLevel(logging.INFO)
    root.handlers[:] = [_pemja_handler()]  # a level the job set: nothing is changed
    _jvm_logging_at("info")
    for name in PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    assert match_flink_log_level() is None
    assert all(_request_line_passes(name) for name in PER_REQUEST_LOGGERS)
