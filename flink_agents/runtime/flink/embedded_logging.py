"""Python's log level in thread mode, matched to the TaskManager's.

In thread mode pemja, when the embedded interpreter starts
(``pemja/logger.py``), sets Python's root logger to DEBUG and adds a handler
that formats every record and hands it over JNI to SLF4J (a logger named
after the record's ``path:line``), where Flink's log configuration, INFO by
default, drops the DEBUG ones. So every ``log.debug`` of every library on the
runner's loop (httpx, httpcore and openai log several per request) is
formatted and crosses into the JVM to be dropped: measured on the review
agent, one subtask, 31 model calls in flight, a tenth of the runner loop's
samples (py-spy) were in ``Logger._log`` and that handler.

``match_flink_log_level`` raises the root logger to the lowest level SLF4J's
root logger has enabled, so such records are not even made. It leaves alone
a root logger that is not pemja's setting alone (another level, or a
handler besides pemja's): the job's own logging configuration wins.

It also holds the HTTP clients' per-request lines (httpx's and httpx2's
``HTTP Request: POST ... "HTTP/1.1 200 OK"``, INFO, one per model call) to
WARNING, where the job has not set those loggers' levels: at Flink's INFO
each crossed into the JVM while holding the interpreter, and filled the
TaskManager's log with a line per call that the runtime's metrics already
count (measured, alternated: 130 to 132 runs/s became 133 to 134, 0.85 to
0.86 of C/L, one subtask in thread mode, 31 calls in flight).
Flink's ``log4j.properties`` cannot single them out (pemja names the SLF4J
logger after the record's source file and line).
"""

from __future__ import annotations

import logging
from typing import Optional

__all__ = ["PER_REQUEST_LOGGERS", "match_flink_log_level"]

log = logging.getLogger(__name__)

# The loggers of the HTTP clients the provider SDKs use (openai's current
# SDK: httpx2), each logging one INFO line per request.
PER_REQUEST_LOGGERS = ("httpx", "httpx2")


def match_flink_log_level() -> Optional[int]:
    """Set Python's root logger to the level the TaskManager logs at, when
    it is pemja's DEBUG (see the module docstring).

    Returns:
        The root logger's level set (``logging.INFO`` with Flink's default
        configuration; the per-request loggers then at WARNING),
        or None: not inside a TaskManager's embedded interpreter, the root
        logger was configured otherwise (a level other than DEBUG, a handler
        other than pemja's), Flink logs DEBUG, or its level could not be read.
    """
    root = logging.getLogger()
    if root.level != logging.DEBUG or not root.handlers or not all(_is_pemja_handler(h) for h in root.handlers):
        return None  # not pemja's setting alone: the job configured logging
    try:
        from _pemja import findClass  # only inside the JVM: pemja registers it
    except ImportError:
        return None
    try:
        java_root = findClass("org.slf4j.LoggerFactory").getLogger("ROOT")
        if java_root.isDebugEnabled():
            return None  # Flink logs DEBUG: so does Python, as pemja set it
        level = (logging.INFO if java_root.isInfoEnabled() else logging.WARNING if java_root.isWarnEnabled()
                 else logging.ERROR if java_root.isErrorEnabled() else logging.CRITICAL)
    except Exception as error:  # a JVM without SLF4J's API here: keep pemja's level, say why
        log.warning("could not read the TaskManager's log level (%r); Python logs at DEBUG, as pemja set it", error)
        return None
    root.setLevel(level)
    for name in PER_REQUEST_LOGGERS:
        client = logging.getLogger(name)
        if client.level == logging.NOTSET:  # a level the job set stays
            client.setLevel(max(level, logging.WARNING))
    return level


def _is_pemja_handler(handler: logging.Handler) -> bool:
    kind = type(handler)
    return kind.__name__ == "PythonLogHandler" and kind.__module__ == "pemja.logger"
