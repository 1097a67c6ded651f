"""Flink Agents HEAD's trace records (``event-log.trace.enabled``), written
from our spans into the event log.

Flink Agents HEAD (apache/flink-agents PR #924) writes, when
``event-log.trace.enabled`` is true, *execution lifecycle* records into the
same event log as the business events (the file
``events-{jobId}-{taskName}-{subtaskId}.log`` or the SLF4J event logger):
one flat JSON object per record (``EventLogRecordJsonSerializer``)::

    {"timestamp": "2024-01-15T10:30:00.123Z", "logLevel": "STANDARD",
     "inputRunId": "<uuid>", "businessKey": "order-1001", "agentName": "ReviewAgent",
     "executionId": "<uuid>", "parentExecutionId": "<uuid>",      (not for an action)
     "entityType": "llm", "entityName": "review_model",
     "entityMetadata": {"model": "gpt-4o"},                       (omitted when empty)
     "eventId": "<uuid>", "eventType": "_execution_finished_event",
     "status": "success", "problemCategory": "...",               (failed only)
     "eventAttributes": {}}                                       (failed: errorType, errorMessage)

``eventType``/``status``: ``_execution_started_event``/``started``,
``_execution_finished_event``/``success``, ``_execution_failed_event``/
``failed``, ``_execution_reused_event``/``reused``. ``entityType``:
``action`` (no parent), ``llm`` and ``tool`` (parent: their action's
execution). ``timestamp`` is Java's ``Instant.toString()`` (UTC, 0, 3, 6 or
9 fraction digits). Each record's type has its event-log level
(``event-log.type._execution_started_event.level``; ``OFF`` drops it);
at ``STANDARD`` ``eventAttributes`` is truncated as the business records are.

Here the records come from the spans ``tracing.RunTrace`` builds from what
the journal committed (``TraceRecordSink`` is a ``tracing.SpanSink``), so:

- they are written after commit, per commit batch, sorted by time within the
  batch (started before finished); a model call committed before its step
  completed is written before its action's ``started`` record;
- ids are deterministic: ``inputRunId`` is the run's trace id as a UUID,
  ``executionId`` a UUID digest of (trace id, span id), ``eventId`` of
  (execution id, event type); a replay writes the same ids;
- a step the replay took from the journal (span ``flink_agents.replayed``)
  is one ``_execution_reused_event`` record, stamped when it was replayed;
- model calls made inside a framework turn or a sub-agent are ``llm``
  children of their action; spans HEAD has no entity type for (the run's
  root, framework turns, sub-agent calls, retrieval, embeddings, memory,
  callbacks, durable calls) are not written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from flink_agents.api.configuration import ConfigurationView
from flink_agents.api.core_options import AgentConfigOptions, EventLogLevel
from flink_agents.runtime.features.tracing import RunTrace, SpanRecord, TraceSettings, span_id_of

__all__ = [
    "FanOutSink", "RecordTracing", "TraceRecordSink", "business_key_of", "execution_id_of", "input_run_id_of", "instant_text",
    "records_of_spans", "with_trace_records",
]

log = logging.getLogger(__name__)

STARTED, FINISHED, FAILED, REUSED = (
    "_execution_started_event", "_execution_finished_event", "_execution_failed_event", "_execution_reused_event",
)
_STATUS = {STARTED: "started", FINISHED: "success", FAILED: "failed", REUSED: "reused"}
_PROBLEM = {"action": "action_execution_failed", "llm": "model_call_failed", "tool": "tool_call_failed"}


def _uuid_of(*parts: Any) -> str:
    """A deterministic UUID (RFC 9562 version 8) of ``parts``."""
    raw = bytearray(hashlib.blake2b("\x00".join(map(str, parts)).encode(), digest_size=16).digest())
    raw[6] = (raw[6] & 0x0F) | 0x80
    raw[8] = (raw[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(raw)))


def input_run_id_of(trace_id: int) -> str:
    """The ``inputRunId`` of the run whose trace is ``trace_id``."""
    return str(uuid.UUID(int=trace_id))


def execution_id_of(trace_id: int, span_id: int) -> str:
    """The ``executionId`` of the span ``span_id`` of trace ``trace_id``."""
    return _uuid_of("execution", f"{trace_id:032x}", f"{span_id:016x}")


def instant_text(ns: int) -> str:
    """Unix nanoseconds as Java's ``Instant.toString()``:
    ``2024-01-15T10:30:00Z``, ``...:00.120Z``, ``...:00.000123Z``, ``...:00.000000123Z``."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos:
        digits = f"{nanos:09d}"
        text += "." + (digits[:3] if nanos % 1_000_000 == 0 else digits[:6] if nanos % 1000 == 0 else digits)
    return text + "Z"


def business_key_of(key_text: str) -> str:
    """HEAD's ``businessKey``: the key's text (a string key as itself; other
    keys as the JSON text they are journaled under)."""
    try:
        key = json.loads(key_text)
    except (TypeError, ValueError):
        return str(key_text)
    return key if isinstance(key, str) else key_text


def _entity(span: SpanRecord, chat_models: Mapping[str, Tuple[Optional[str], Optional[str]]]
            ) -> Optional[Tuple[str, str, Dict[str, Any]]]:
    """``(entityType, entityName, entityMetadata)`` of a span, or None for a
    span HEAD has no entity for."""
    attributes = span.attributes
    operation = attributes.get("gen_ai.operation.name")
    if operation is None and span.parent_id is not None and isinstance(attributes.get("flink_agents.action"), str):
        return "action", attributes["flink_agents.action"], {}
    if operation == "chat":
        model = attributes.get("gen_ai.request.model")
        name = attributes.get("flink_agents.chat_model")
        if not isinstance(name, str):
            # The chat model resource: the one setup configured with this model.
            setups = [setup for setup, (request, _) in chat_models.items() if model and request == model]
            name = setups[0] if len(setups) == 1 else model or span.name.partition(" ")[2]
        return "llm", name, ({"model": model} if isinstance(model, str) else {})
    if operation == "execute_tool":
        call_id = attributes.get("gen_ai.tool.call.id")
        return "tool", str(attributes.get("gen_ai.tool.name")), ({"toolCallId": str(call_id)} if call_id else {})
    return None


def records_of_spans(
    spans: Sequence[SpanRecord], run: Tuple[Any, str, str, int], agent_name: str,
    chat_models: Mapping[str, Tuple[Optional[str], Optional[str]]] | None = None,
    now_ns: Callable[[], int] = time.time_ns,
) -> List[Dict[str, Any]]:
    """HEAD's trace records of ``spans`` (one ``RunTrace`` export), without
    ``logLevel`` (the event log adds it), sorted by time.

    Args:
        spans: Spans of one run, as ``tracing.SpanSink.export`` gets them.
        run: ``(store, journal id, key text, seq)`` of that run.
        agent_name: ``agentName`` (HEAD: the agent's class name).
        chat_models: ``TraceSettings.chat_models``: names a model call's
            chat model resource (``entityName``) by its configured model.
        now_ns: The clock of ``_execution_reused_event`` records.
    """
    chat_models = chat_models or {}
    timed: List[Tuple[int, int, int, Dict[str, Any]]] = []
    for index, span in enumerate(spans):
        entity = _entity(span, chat_models)
        if entity is None:
            continue
        entity_type, entity_name, metadata = entity
        context: Dict[str, Any] = {
            "inputRunId": input_run_id_of(span.trace_id), "businessKey": business_key_of(run[2]),
            "agentName": agent_name, "executionId": execution_id_of(span.trace_id, span.span_id),
        }
        if entity_type != "action":
            step = str(span.attributes.get("flink_agents.step", "")).split("/", 1)[0]
            context["parentExecutionId"] = execution_id_of(span.trace_id, span_id_of(span.trace_id, run[1], "step", step))
        context["entityType"], context["entityName"] = entity_type, entity_name
        if metadata:
            context["entityMetadata"] = metadata
        outer = entity_type == "action"

        def record(event_type: str, attributes: Dict[str, Any], problem: Optional[str] = None) -> Dict[str, Any]:
            body = {**context, "eventId": _uuid_of("event", context["executionId"], event_type),
                    "eventType": event_type, "status": _STATUS[event_type]}
            if problem is not None:
                body["problemCategory"] = problem
            body["eventAttributes"] = attributes
            return body

        if span.attributes.get("flink_agents.replayed"):
            at = now_ns()
            timed.append((at, 1, index, {"timestamp": instant_text(at), **record(REUSED, {})}))
            continue
        timed.append((span.start_ns, 0 if outer else 1, index, {"timestamp": instant_text(span.start_ns),
                                                                **record(STARTED, {})}))
        if span.error is None:
            end = record(FINISHED, {})
        else:
            error_type, _, message = span.error.partition(": ")
            attributes = {"errorType": str(span.attributes.get("error.type") or error_type)}
            if message:
                attributes["errorMessage"] = message
            end = record(FAILED, attributes, _PROBLEM[entity_type])
        timed.append((span.end_ns, 3 if outer else 2, index, {"timestamp": instant_text(span.end_ns), **end}))
    timed.sort(key=lambda item: item[:3])
    return [item[3] for item in timed]


class TraceRecordSink:
    """A ``tracing.SpanSink`` writing HEAD's trace records through the event
    log's logger (``event_log.FileEventLogger`` or ``LoggingEventLogger``),
    with the event log's levels and STANDARD truncation. Never raises: a
    failed write is logged, as the event log's own are.

    Args:
        event_log: The engine's ``EventLog`` (its ``logger`` must not be None).
        settings: The job's ``TraceSettings`` (agent name, chat models).
        now_ns: The clock of reused records.
    """

    def __init__(self, event_log: Any, settings: TraceSettings, now_ns: Callable[[], int] = time.time_ns) -> None:
        self._log = event_log
        self._settings = settings
        self._now_ns = now_ns

    def export(self, run: Tuple[Any, str, str, int], spans: List[SpanRecord]) -> None:
        try:
            records = []
            for record in records_of_spans(spans, run, self._settings.agent_name, self._settings.chat_models,
                                           self._now_ns):
                level = self._log.level_of(record["eventType"])
                if level is EventLogLevel.OFF:
                    continue
                if record["eventAttributes"]:
                    record["eventAttributes"] = self._log.cut(level, record["eventAttributes"])
                records.append({"timestamp": record.pop("timestamp"), "logLevel": level.value, **record})
            if records:
                self._log.logger.write(records)
        except Exception as error:
            log.warning("trace records of run %s/%s#%s lost: %r", run[1], run[2], run[3], error)

    def flush(self, timeout_s: float = 30.0) -> bool:
        return True  # every write is flushed as it is made

    def shutdown(self) -> None:
        pass


class FanOutSink:
    """One ``tracing.SpanSink`` handing each export to several sinks (the
    OpenTelemetry sink and the trace records), in order; the first sink's
    attributes (``schedule_delay_ms``, ``export_timeout_s``) show through."""

    def __init__(self, sinks: Sequence[Any]) -> None:
        self.sinks = list(sinks)

    def export(self, run: Tuple[Any, str, str, int], spans: List[SpanRecord]) -> None:
        for sink in self.sinks:
            sink.export(run, spans)

    def flush(self, timeout_s: float = 30.0) -> bool:
        return all([sink.flush(timeout_s) for sink in self.sinks])

    def shutdown(self) -> None:
        for sink in self.sinks:
            sink.shutdown()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sinks[0], name)


class RecordTracing:
    """A job's tracing with trace records: what the engine uses of
    ``otel_export.JobTracing`` (``settings``, ``sink``, ``for_run``,
    ``start_recovery``), its runs' spans going to the trace records and, when
    ``otel`` is given, to OpenTelemetry too. Lost-span recovery stays
    OpenTelemetry's alone (it would write records a second time)."""

    def __init__(self, settings: TraceSettings, records: TraceRecordSink, otel: Any = None) -> None:
        self.settings = settings
        self.otel = otel
        self.sink = records if otel is None else FanOutSink([otel.sink, records])

    def for_run(self, store: Any, journal_id: str, key_text: str, seq: int, key: Any) -> RunTrace:
        """The ``RunTrace`` of one record's run."""
        return RunTrace(self.settings, self.sink, (store, journal_id, key_text, seq), key)

    def start_recovery(self, store: Any, journal_id: str, window_s: float) -> threading.Event:
        if self.otel is not None:
            return self.otel.start_recovery(store, journal_id, window_s)
        return threading.Event()


def with_trace_records(tracing: Any, config: Mapping[str, Any], plan: Any, event_log: Any) -> Any:
    """The job's tracing with HEAD's trace records added when
    ``event-log.trace.enabled`` is true and the event log has a logger;
    otherwise ``tracing`` itself (None: no tracing at all).

    Args:
        tracing: ``otel_export.job_tracing``'s result (None: OpenTelemetry off).
        config: The job's configuration.
        plan: The compiled plan (for the span settings when OpenTelemetry is off).
        event_log: The engine's ``EventLog`` or None.
    """
    if not ConfigurationView(config).get(AgentConfigOptions.EVENT_LOG_TRACE_ENABLED):
        return tracing
    if event_log is None or event_log.logger is None:
        return tracing
    if tracing is not None:
        settings = tracing.settings
    else:
        from flink_agents.runtime.execution.usage import PriceTable
        from flink_agents.runtime.features.tracing import settings_of

        settings = settings_of(plan, False, PriceTable(None))
    return RecordTracing(settings, TraceRecordSink(event_log, settings), tracing)
