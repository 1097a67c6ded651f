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
"""

from __future__ import annotations

import logging
from typing import Optional

__all__ = ["match_flink_log_level"]

log = logging.getLogger(__name__)


def match_flink_log_level() -> Optional[int]:
    """Set Python's root logger to the level the TaskManager logs at, when
    it is pemja's DEBUG (see the module docstring).

    Returns:
        The level set (``logging.INFO`` with Flink's default configuration),
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
    return level


def _is_pemja_handler(handler: logging.Handler) -> bool:
    kind = type(handler)
    return kind.__name__ == "PythonLogHandler" and kind.__module__ == "pemja.logger"
