"""Failures of a Flink job, named by their root Python cause.

PyFlink reports any failure of a job as a ``Py4JJavaError`` of the client's
call (``o141.hasNext``), with the Python exception buried in the Java cause
chain. ``job_failures()`` turns it into ``FlinkJobFailed``, whose ``str()``
is one line naming that exception.
"""

from __future__ import annotations

import logging
import re
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional, Tuple

from py4j.protocol import Py4JJavaError

__all__ = ["FlinkJobFailed", "job_failures"]

log = logging.getLogger(__name__)

_TRACEBACK = "Traceback (most recent call last):"
# Thread mode (pemja): the Java exception's message is "<class 'mod.Type'>: message".
_PEMJA_MESSAGE = re.compile(r"<class '(?P<type>[\w.]+)'>: ?(?P<message>.*)", re.DOTALL)
_SUMMARY_MAX_CHARS = 2000


class FlinkJobFailed(Py4JJavaError):
    """A Flink job failed; ``str()`` is one line naming the root cause.

    PyFlink reports any failure of a job (an action's ``ActionFailed``, a
    journal store that cannot be reached, a record that fails to decode) as
    a ``Py4JJavaError`` of the client's call (``o141.hasNext``), with the
    Python exception buried in the Java cause chain. This error names it:
    ``"JournalUnavailableError: load_run of run (...) failed: ..."``. A
    ``Py4JJavaError`` still, so ``except Py4JJavaError`` keeps working.

    Attributes:
        cause_type: Qualified name of the root Python exception
            (``"flink_agents.runtime.errors.ActionFailed"``), or of the
            deepest Java exception when no Python exception is in the chain.
        cause_message: Its message, whitespace collapsed to one line.
        java_trace: The client error's full text: the Java stack trace with
            every cause, the Python worker's traceback included. The
            ``Py4JJavaError`` itself is the ``__cause__``.
    """

    def __init__(self, error: Py4JJavaError) -> None:
        super().__init__(error.errmsg, error.java_exception)
        self.java_trace = _full_text(error)
        self.cause_type, self.cause_message = _root_cause(error.java_exception, self.java_trace)

    def __str__(self) -> str:
        short_type = self.cause_type.rsplit(".", 1)[-1]
        return f"{short_type}: {self.cause_message}" if self.cause_message else short_type


@contextmanager
def job_failures() -> Iterator[None]:
    """Turn a failed job's ``Py4JJavaError`` raised in the block into a
    ``FlinkJobFailed`` naming the root Python cause (chained from it).

    Wrap whatever runs or reads a job: ``env.execute()``, or the iteration
    of ``execute_and_collect``::

        with job_failures(), outputs.execute_and_collect("job") as collected:
            for output in collected: ...

    Raises:
        FlinkJobFailed: The block raised a ``Py4JJavaError``.
    """
    try:
        yield
    except FlinkJobFailed:
        raise
    except Py4JJavaError as error:
        raise FlinkJobFailed(error) from error


def _full_text(error: Py4JJavaError) -> str:
    """The error's Java stack trace (with causes), or its own message if the
    gateway can no longer answer (the JVM is gone)."""
    try:
        return Py4JJavaError.__str__(error)
    except Exception as exc:  # noqa: BLE001: the summary must not hide the failure
        return f"{error.errmsg} (Java stack trace unavailable: {type(exc).__name__}: {exc})"


def _java_chain(java_exception: Any) -> List[Tuple[str, str]]:
    """``(class name, message)`` of ``java_exception`` and its causes,
    outermost first; empty if the gateway cannot answer."""
    chain: List[Tuple[str, str]] = []
    seen = set()
    current = java_exception
    try:
        while current is not None and len(chain) < 64:
            ident = current.hashCode()
            if ident in seen:
                break
            seen.add(ident)
            chain.append((str(current.getClass().getName()), str(current.getMessage() or "")))
            current = current.getCause()
    except Exception as exc:  # noqa: BLE001: fall back to the trace text
        log.debug("cannot walk the Java cause chain: %s", exc)
    return chain


def _root_cause(java_exception: Any, java_trace: str) -> Tuple[str, str]:
    """``(type, message)`` of the Python exception the job failed with: the
    deepest one in the Java cause chain, and in a Python traceback its last
    exception (the outermost of a chain: the one naming action, key or
    record); else the deepest Java exception's."""
    chain = _java_chain(java_exception)
    for _, message in reversed(chain):
        found = _python_exception(message)
        if found is not None:
            return found
    found = _python_exception(java_trace)
    if found is not None:
        return found
    if chain:
        name, message = chain[-1]
        return name, _one_line(message)
    return "Py4JJavaError", _one_line(java_trace.splitlines()[0] if java_trace else "")


def _python_exception(text: str) -> Optional[Tuple[str, str]]:
    """The last Python exception in ``text``: a pemja message
    (``<class 'T'>: m``) or a traceback's closing ``T: m`` lines."""
    pemja = _PEMJA_MESSAGE.match(text)
    if pemja:
        return pemja.group("type"), _one_line(pemja.group("message"))
    start = text.rfind(_TRACEBACK)
    if start < 0:
        return None
    lines = text[start + len(_TRACEBACK):].splitlines()
    index = 0
    # Frames ("  File ...") and their source and caret lines are indented.
    while index < len(lines) and (not lines[index] or lines[index].startswith(" ")):
        index += 1
    exception_lines: List[str] = []
    for line in lines[index:]:
        if line.startswith("\tat ") or line.startswith("Caused by:") or re.match(r"\t\.\.\. \d+ more", line):
            break  # the Java stack trace resumes
        exception_lines.append(line)
    if not exception_lines:
        return None
    head, _, message = exception_lines[0].partition(":")
    if not re.fullmatch(r"[\w.]+", head.strip()):
        return None
    return head.strip(), _one_line("\n".join([message, *exception_lines[1:]]))


def _one_line(text: str) -> str:
    """``text`` with its whitespace collapsed, at most ``_SUMMARY_MAX_CHARS``."""
    line = " ".join(text.split())
    return line if len(line) <= _SUMMARY_MAX_CHARS else line[: _SUMMARY_MAX_CHARS - 1] + "…"
