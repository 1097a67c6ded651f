"""The event log and event listeners: every event an agent processed, after it is durable.

Configured with Flink Agents 0.3.1's keys (``AgentConfigOptions``; the
record format and the truncation follow 0.3.1's ``docs/operations/monitoring.md``):

- ``event-log.level`` (``OFF``, ``STANDARD``, ``VERBOSE``; 0.3.1's default
  ``STANDARD``) and ``event-log.type.<EVENT_TYPE>.level`` per event type,
  resolved up the dots of a dotted type (``a.b.C`` -> ``a.b`` -> ``a``) and
  then the global level, as 0.3.1 resolves them;
- at ``STANDARD`` the event's payload is truncated: strings longer than
  ``event-log.standard.max-string-length`` become ``{"truncatedString":
  "<first N chars>...", "omittedChars": M}``, arrays longer than
  ``max-array-elements`` ``{"truncatedList": [...], "omittedElements": M}``,
  objects at ``max-depth`` keep their scalars: ``{"truncatedObject": {...},
  "omittedFields": N}``; ``0`` turns a limit off; the event's ``eventType``,
  ``id``, ``type`` and ``attributes`` are never truncated; the counter
  ``eventLogTruncatedEvents`` counts truncated records;
- the logger: ``baseLogDir`` (or ``eventLoggerType: file``) writes one JSON
  line per event (``prettyPrint``: indented JSON instead) to
  ``{baseLogDir}/events-{jobId}-{taskName}-{subtaskId}.log`` (default
  directory ``<tmp>/flink-agents-<uid>``, not 0.3.1's shared
  ``<tmp>/flink-agents``; files 0600, directory 0700, see
  ``FileEventLogger``); with ``eventLoggerType: slf4j`` set, or
  a level of INFO or lower set on the Python logger ``flink_agents.event_log``
  itself, records go to that logger at INFO; otherwise nowhere (a
  difference from 0.3.1, whose SLF4J event log is on by default:
  ``_logging_opted_in``);
- ``event-listeners``: import paths of ``EventListener`` classes
  (``flink_agents.api.event_listener``), called for every event whatever
  its log level.

A record::

    {"timestamp": "2026-01-15T10:30:00.123Z", "logLevel": "STANDARD", "eventType": "_input_event",
     "key": "k1", "seq": 0, "action": null, "handledBy": ["review"],
     "event": {"eventType": "_input_event", "id": "...", "input": ...}}

``action`` is the action that sent the event (null for the input),
``handledBy`` the actions that processed it, ``seq`` the record's sequence
number within its key. Callback URLs and ids in the event are redacted at
every level (``capability_redaction``: ``[callback <fingerprint>]``).

When: an event is logged once it was processed (all its actions finished)
and the steps that produced and processed it are committed to the journal
(``RunJournal``'s ``on_commit``), or, for a run that journals nothing, when
the run finished: a follower never sees an event a failover could undo.
A replayed run logs its events again (at least once; ids are
deterministic). Sub-agent runs are not logged.

With ``event-log.trace.enabled`` (Flink Agents HEAD's key; off by
default) a record also carries HEAD's lineage and trace context: in
``event``, ``upstreamEventId`` and ``upstreamActionName`` (the event the
sending action processed, and that action: what HEAD's
``flink-agents-trace-tree`` reads from a nested record), and at the top
level ``inputRunId``, ``businessKey`` and, for an event an action sent,
that action's ``executionId``, ``entityType`` and ``entityName``: the ids of
its trace records (``trace_records``, which writes those into the same
logger).

Off (every level ``OFF`` or no enabled logger, and no listener) the engine
builds no event log at all, so the action loop pays one ``is None`` test
per event.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import tempfile
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Tuple

from pydantic_core import to_jsonable_python

from flink_agents._private_files import check_private_dir, make_private_dirs, open_private
from flink_agents.api.configuration import ConfigurationView, convert_value
from flink_agents.api.core_options import AgentConfigOptions, EventLogLevel, LoggerType
from flink_agents.api.event_listener import EventContext, EventListener
from flink_agents.api.events.event import EVENT_FIELDS_FLAT, Event, row_to_json
from flink_agents.runtime.execution.metrics import BuiltinMetrics
from flink_agents.runtime.features.capability_redaction import redact
from flink_agents.runtime.features.trace_records import business_key_of, execution_id_of, input_run_id_of
from flink_agents.runtime.features.tracing import span_id_of, trace_id_of
from flink_agents.stores.journal import COMPLETION, JournalEntry

__all__ = [
    "EVENT_LOGGER_NAME", "EventLog", "FileEventLogger", "LoggingEventLogger", "RunEventLog", "default_log_dir", "truncate",
]

log = logging.getLogger(__name__)

EVENT_LOGGER_NAME = "flink_agents.event_log"
_TYPE_KEY = "event-log.type.{}.level"
_PROTECTED = frozenset({"eventType", "id", "type", "attributes"})
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


# -- truncation (STANDARD) ---------------------------------------------------------


class _Truncator:
    """One pass over a JSON value; ``hit`` tells whether anything was cut."""

    __slots__ = ("max_string", "max_array", "max_depth", "hit")

    def __init__(self, max_string: int, max_array: int, max_depth: int) -> None:
        self.max_string, self.max_array, self.max_depth = max_string, max_array, max_depth
        self.hit = False

    def string(self, text: str) -> Any:
        if self.max_string <= 0 or len(text) <= self.max_string:
            return text
        self.hit = True
        return {"truncatedString": text[: self.max_string] + "...", "omittedChars": len(text) - self.max_string}

    def value(self, value: Any, depth: int) -> Any:
        """``value`` found at nesting ``depth`` (its container's depth + 1)."""
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, dict):
            return self.object(value, depth, top=False)
        if isinstance(value, list):
            items = [self.value(item, depth) for item in value]
            if self.max_array > 0 and len(items) > self.max_array:
                self.hit = True
                return {"truncatedList": items[: self.max_array], "omittedElements": len(items) - self.max_array}
            return items
        return value

    def object(self, node: Dict[str, Any], depth: int, top: bool) -> Dict[str, Any]:
        if self.max_depth > 0 and depth >= self.max_depth:
            kept: Dict[str, Any] = {}
            omitted = 0
            for name, child in node.items():
                if top and name in _PROTECTED:
                    kept[name] = child
                elif isinstance(child, (dict, list)):
                    omitted += 1
                else:
                    kept[name] = self.string(child) if isinstance(child, str) else child
            if not omitted:
                return kept
            self.hit = True
            return {"truncatedObject": kept, "omittedFields": omitted}
        return {
            name: child if top and name in _PROTECTED else self.value(child, depth + 1)
            for name, child in node.items()
        }


def truncate(event: Dict[str, Any], max_string_length: int, max_array_elements: int,
             max_depth: int) -> Tuple[Dict[str, Any], bool]:
    """``event`` (an event's JSON object, depth 1) cut to the STANDARD limits
    (``0`` turns a limit off), and whether anything was cut. The input is not
    changed."""
    truncator = _Truncator(max_string_length, max_array_elements, max_depth)
    return truncator.object(event, 1, top=True), truncator.hit


# -- loggers -------------------------------------------------------------------------


def default_log_dir() -> str:
    """The file logger's directory when ``baseLogDir`` is not set:
    ``<tmp>/flink-agents-<uid>``, this user's own (0.3.1's shared
    ``/tmp/flink-agents`` could be made or filled with links by anyone)."""
    user = os.geteuid() if hasattr(os, "geteuid") else os.environ.get("USERNAME", "user")
    return os.path.join(tempfile.gettempdir(), f"flink-agents-{user}")


class FileEventLogger:
    """Appends records to ``{directory}/events-{job}-{task}-{subtask}.log``,
    a private file (``flink_agents._private_files``): created with mode
    0600, never through a symbolic link, in a directory only this user can
    write.

    Args:
        directory: Created (0700) if missing; None: ``default_log_dir()``,
            which must not be a link either (a name in the shared ``<tmp>``).
        job_id, task_name: Put in the file name (characters other than
            letters, digits, ``.``, ``_`` and ``-`` become ``_``).
        subtask: The subtask index.
        pretty: Indented multi-line JSON per record instead of JSON lines.

    Raises:
        UnsafePathError: The directory is another user's or writable by
            others, or the file is a link or another user's (the message
            names it).
        OSError: The directory or the file cannot be created.
    """

    def __init__(self, directory: str | None, job_id: str, task_name: str, subtask: int, pretty: bool = False) -> None:
        default = directory is None
        directory = default_log_dir() if directory is None else directory
        make_private_dirs(directory)
        check_private_dir(directory, follow_link=not default)
        name = "-".join(_UNSAFE_NAME.sub("_", str(part)) for part in ("events", job_id, task_name, subtask))
        self.path = os.path.join(directory, name + ".log")
        self._indent = 2 if pretty else None
        self._file = os.fdopen(open_private(self.path, append=True), "a", encoding="utf-8")

    def write(self, records: List[Dict[str, Any]]) -> None:
        """Append ``records`` and flush."""
        for record in records:
            self._file.write(json.dumps(record, ensure_ascii=False, indent=self._indent, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class LoggingEventLogger:
    """Writes each record as one JSON line to the Python logger
    ``flink_agents.event_log`` at INFO (0.3.1's SLF4J event logger)."""

    def __init__(self, pretty: bool = False) -> None:
        self._logger = logging.getLogger(EVENT_LOGGER_NAME)
        self._indent = 2 if pretty else None

    def write(self, records: List[Dict[str, Any]]) -> None:
        for record in records:
            self._logger.info("%s", json.dumps(record, ensure_ascii=False, indent=self._indent, default=str))

    def close(self) -> None:
        pass


# -- configuration -----------------------------------------------------------------


def _load_listener(path: Any) -> EventListener:
    key = AgentConfigOptions.EVENT_LISTENERS.key
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"configuration {key!r}: a listener must be an import path string, got {path!r}")
    module_name, sep, attribute = path.strip().partition(":")
    if not sep:
        module_name, _, attribute = module_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"configuration {key!r}: cannot import listener {path!r}: {exc}") from exc
    try:
        listener = cls()
    except Exception as exc:
        raise TypeError(f"configuration {key!r}: listener {path!r} cannot be built without arguments: {exc}") from exc
    if not callable(getattr(listener, "on_event_processed", None)):
        raise TypeError(
            f"configuration {key!r}: {path!r} is not an EventListener (it has no on_event_processed(context, event))"
        )
    return listener


def _jsonable_fallback(value: Any) -> Any:
    """A ``pyflink.common.Row`` as 0.3.1's JSON form (``row_to_json``); any
    other value JSON does not carry as its ``repr``."""
    try:
        return row_to_json(value)
    except TypeError:
        return repr(value)


def _jsonable(event: Event) -> Dict[str, Any]:
    """The event's fields as JSON values (bytes as base64, a ``Row`` as
    ``{"type": "Row", "values", "fields"}``, other values JSON does not
    carry as their ``repr``). Logging never fails a run: an event that
    still cannot be serialized is logged as its id and the error."""
    try:
        # Fields beside id and type, as this log has always written them.
        return to_jsonable_python(
            event, fallback=_jsonable_fallback, bytes_mode="base64", context={EVENT_FIELDS_FLAT: True}
        )
    except Exception as exc:
        return {"id": str(getattr(event, "id", "")), "unloggable": f"{type(exc).__name__}: {exc}"}


def _logging_opted_in(config: Mapping[str, Any]) -> bool:
    """Whether the job asked for the logging event logger: ``eventLoggerType``
    set explicitly, or a level of INFO or lower set on the logger
    ``flink_agents.event_log`` itself. Unlike 0.3.1 (whose SLF4J event log is
    on by default), an inherited INFO level is not enough: PyFlink's Python
    workers log at INFO, and every job would then pay for an event log it
    never asked for."""
    if any(key in config for key in AgentConfigOptions.EVENT_LOGGER_TYPE.keys):
        return True
    logger = logging.getLogger(EVENT_LOGGER_NAME)
    return logger.level != logging.NOTSET and logger.level <= logging.INFO


def _iso(now_s: float) -> str:
    return datetime.fromtimestamp(now_s, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class EventLog:
    """The engine's event log: levels, limits, logger and listeners.

    Build it with ``from_config`` (None when nothing would be logged or
    told); each run gets a ``RunEventLog`` from ``for_run``.
    """

    def __init__(self, level: EventLogLevel, type_levels: Dict[str, EventLogLevel], limits: Tuple[int, int, int],
                 logger: Any, listeners: List[EventListener], metrics: BuiltinMetrics | None,
                 trace_enabled: bool = False) -> None:
        self._level = level
        self._type_levels = type_levels
        self._levels: Dict[str, EventLogLevel] = {}
        self._limits = limits
        self.logger = logger
        self.listeners = listeners
        self._metrics = metrics
        self.trace_enabled = trace_enabled

    @classmethod
    def from_config(cls, config: Mapping[str, Any], job_id: str, task_name: str = "local", subtask: int = 0,
                    metrics: BuiltinMetrics | None = None) -> "EventLog | None":
        """The event log ``config`` asks for, or None if it would do nothing.

        Raises:
            ValueError: A key has a bad value, or a listener cannot be
                imported (the message names the key).
            TypeError: A listener is not an ``EventListener``.
            OSError: The file logger's directory or file cannot be created.
        """
        view = ConfigurationView(config)
        options = AgentConfigOptions
        level = view.get(options.EVENT_LOG_LEVEL)
        type_levels = {
            key[len("event-log.type."): -len(".level")]: convert_value(key, value, EventLogLevel)
            for key, value in view.items()
            if key.startswith("event-log.type.") and key.endswith(".level") and value is not None
        }
        limits = (view.get(options.EVENT_LOG_MAX_STRING_LENGTH), view.get(options.EVENT_LOG_MAX_ARRAY_ELEMENTS),
                  view.get(options.EVENT_LOG_MAX_DEPTH))
        listeners = [_load_listener(path) for path in view.get(options.EVENT_LISTENERS) or []]
        base_dir = view.get(options.BASE_LOG_DIR)
        logger_type = view.get(options.EVENT_LOGGER_TYPE)
        pretty = view.get(options.PRETTY_PRINT)
        anything = level is not EventLogLevel.OFF or any(lv is not EventLogLevel.OFF for lv in type_levels.values())
        logger: Any = None
        if anything and (base_dir or logger_type is LoggerType.FILE):
            logger = FileEventLogger(base_dir or None, job_id, task_name, subtask, pretty)
        elif anything and _logging_opted_in(config):
            logger = LoggingEventLogger(pretty)
        if logger is None and not listeners:
            return None
        return cls(level, type_levels, limits, logger, listeners, metrics, view.get(options.EVENT_LOG_TRACE_ENABLED))

    def cut(self, level: EventLogLevel, value: Dict[str, Any]) -> Dict[str, Any]:
        """``value`` (a JSON object) cut to the STANDARD limits if ``level``
        is STANDARD, counted in ``eventLogTruncatedEvents`` if anything was."""
        if level is not EventLogLevel.STANDARD or not any(self._limits):
            return value
        value, cut = truncate(value, *self._limits)
        if cut and self._metrics is not None:
            self._metrics.event_log_truncated()
        return value

    def level_of(self, event_type: str) -> EventLogLevel:
        """The level of ``event_type`` (per-type keys, walked up its dots, then the global level)."""
        found = self._levels.get(event_type)
        if found is None:
            name = event_type
            while found is None:
                found = self._type_levels.get(name)
                if "." not in name:
                    break
                name = name.rpartition(".")[0]
            found = self._levels[event_type] = found or self._level
        return found

    def for_run(self, key: Any, seq: int, now: Callable[[], float], journal_id: str | None = None,
                key_text: str | None = None) -> "RunEventLog":
        """The log of one record's run (``now``: the run clock's Unix seconds;
        ``journal_id`` and ``key_text``: the run's identity, which the trace
        context of ``event-log.trace.enabled`` derives its ids from; without
        them a record carries the lineage only)."""
        trace = None
        if self.trace_enabled and journal_id is not None and key_text is not None:
            trace = (journal_id, trace_id_of(journal_id, key_text, seq), business_key_of(key_text))
        return RunEventLog(self, key, seq, now, trace)

    def deliver(self, key: Any, seq: int, entries: List["_Entry"]) -> None:
        """Log ``entries`` and tell the listeners (errors of either are logged, never raised)."""
        if self.logger is not None:
            records = [self._record(key, seq, entry) for entry in entries if entry.payload is not None]
            if records:
                try:
                    self.logger.write(records)
                except Exception as exc:
                    log.warning("event log write failed (%d records lost): %r", len(records), exc)
        for listener in self.listeners:
            for entry in entries:
                context = EventContext(entry.event_type, entry.event_class, entry.timestamp, key, seq,
                                       entry.sender, list(entry.handled_by))
                try:
                    listener.on_event_processed(context, entry.event)
                except Exception as exc:
                    log.warning("event listener %s failed on %s of key %r: %r",
                                type(listener).__name__, entry.event_type, key, exc)

    def _record(self, key: Any, seq: int, entry: "_Entry") -> Dict[str, Any]:
        level = entry.level
        # Callback URLs and ids never reach the log, at any level; before
        # truncation, which could cut a URL where the pattern misses it.
        payload = self.cut(level, redact(entry.payload))
        return {
            "timestamp": entry.timestamp, "logLevel": level.value, **entry.context, "eventType": entry.event_type,
            "key": to_jsonable_python(key, fallback=repr, bytes_mode="base64"), "seq": seq, "action": entry.sender,
            "handledBy": entry.handled_by, "event": payload,
        }

    def close(self) -> None:
        if self.logger is not None:
            self.logger.close()


class _Entry:
    """One event of a run, from the moment the loop took it until delivered."""

    __slots__ = ("event", "event_type", "event_class", "timestamp", "level", "payload", "sender", "handled_by",
                 "after", "context")

    def __init__(self, event: Event, timestamp: str, level: EventLogLevel, payload: Dict[str, Any] | None,
                 sender: str | None) -> None:
        self.event = event
        self.event_type = event.get_type()
        self.event_class = f"{type(event).__module__}.{type(event).__qualname__}"
        self.timestamp = timestamp
        self.level = level
        self.payload = payload
        self.sender = sender
        self.handled_by: List[str] = []
        self.after: str | None = None  # the step whose commit makes it durable (None: already)
        self.context: Dict[str, Any] = {}  # HEAD's trace context (event-log.trace.enabled)


class RunEventLog:
    """The event log of one run: what the action loop reports, held until durable.

    The action loop calls ``took`` when it dequeues an event, ``stepped``
    for each step that handled it (run or replayed), ``processed`` when all
    did; the journal calls ``committed`` after each commit; the engine calls
    ``finished`` when the run ended (ok or skipped).
    """

    def __init__(self, event_log: EventLog, key: Any, seq: int, now: Callable[[], float],
                 trace: Tuple[str, int, str] | None = None) -> None:
        self._log = event_log
        self._key = key
        self._seq = seq
        self._now = now
        self._trace = trace  # (journal id, trace id, business key) with event-log.trace.enabled
        # id(queued event) -> (the action that sent it, its step, the event that step processed)
        self._senders: Dict[int, Tuple[str, str, str]] = {}
        self._durable: set[str] = set()  # steps whose completion is in the journal
        self._last_step: str | None = None
        self._pending: List[_Entry] = []

    def took(self, event: Event) -> _Entry:
        """The loop dequeued ``event``: capture it now, before any action changes it."""
        event_type = event.get_type()
        level = self._log.level_of(event_type)
        payload = None
        if level is not EventLogLevel.OFF and self._log.logger is not None:
            payload = {"eventType": event_type, **_jsonable(event)}
            if not self._log.trace_enabled:  # 0.3.1's record: the event's lineage only with traces on
                payload.pop("upstreamEventId", None)
                payload.pop("upstreamActionName", None)
        copy = event
        if self._log.listeners:
            try:
                copy = event.model_copy(deep=True)
            except Exception:  # a value that cannot be copied: the listener gets the event itself
                copy = event
        sender = self._senders.pop(id(event), None)
        entry = _Entry(copy, _iso(self._now()), level, payload, None if sender is None else sender[0])
        if self._log.trace_enabled:
            if payload is not None and sender is not None:
                payload["upstreamEventId"], payload["upstreamActionName"] = sender[2], sender[0]
            if self._trace is not None:
                entry.context = self._context(sender)
        return entry

    def _context(self, sender: Tuple[str, str, str] | None) -> Dict[str, Any]:
        """HEAD's trace context of an event ``sender`` sent (None: the input)."""
        journal_id, trace_id, business_key = self._trace
        context: Dict[str, Any] = {"inputRunId": input_run_id_of(trace_id), "businessKey": business_key}
        if sender is not None:
            context.update({
                "executionId": execution_id_of(trace_id, span_id_of(trace_id, journal_id, "step", sender[1])),
                "entityType": "action", "entityName": sender[0],
            })
        return context

    def stepped(self, entry: _Entry, action: str, step: str, sent: List[Event], replayed: bool) -> None:
        """Step ``step`` of ``action`` handled ``entry``'s event and sent ``sent``."""
        entry.handled_by.append(action)
        upstream = str(getattr(entry.event, "id", ""))
        for event in sent:
            self._senders[id(event)] = (action, step, upstream)
        self._last_step = step
        if replayed:
            self._durable.add(step)

    def processed(self, entry: _Entry) -> None:
        """Every action of ``entry``'s event finished: deliver it once durable.

        Completions commit in the order they were made, so the event is
        durable once the latest step completed so far is committed."""
        entry.after = self._last_step
        self._pending.append(entry)
        self._release()

    def committed(self, entries: List[JournalEntry]) -> None:
        """A journal write of this run landed (``RunJournal`` ``on_commit``)."""
        for entry in entries:
            if entry.ordinal == COMPLETION:
                self._durable.add(entry.step)
        self._release()

    def finished(self) -> None:
        """The run ended (ok or skipped): what it processed stands (a run that
        journaled nothing is deterministic: a re-run does the same)."""
        ready, self._pending = self._pending, []
        if ready:
            self._log.deliver(self._key, self._seq, ready)

    def _release(self) -> None:
        ready = 0
        for entry in self._pending:
            if entry.after is not None and entry.after not in self._durable:
                break
            ready += 1
        if ready:
            batch, self._pending = self._pending[:ready], self._pending[ready:]
            self._log.deliver(self._key, self._seq, batch)
