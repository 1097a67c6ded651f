"""Hands finished spans (``tracing.SpanRecord``) to the OpenTelemetry SDK,
configured as any OpenTelemetry program is.

Needs the ``[otel]`` extra (``opentelemetry-sdk`` and the OTLP/HTTP
exporter). Configuration, the standard environment variables first
(OpenTelemetry's "SDK environment variables" specification), each with an
``agent:`` config option for what the worker's environment cannot say (a
cluster's TaskManagers do not have the client's environment):

=====================================  ====================================  ==========================
environment                            ``agent:`` option                     meaning
=====================================  ====================================  ==========================
``OTEL_TRACES_EXPORTER``               ``tracing.exporter``                  ``otlp``, ``console``,
                                                                             ``none`` (default: off)
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``  ``tracing.otlp.protocol``              ``http/protobuf`` (default)
/ ``OTEL_EXPORTER_OTLP_PROTOCOL``                                            or ``grpc`` (needs the gRPC
                                                                             exporter installed)
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``  ``tracing.otlp.endpoint``             the receiver; the base URL
/ ``OTEL_EXPORTER_OTLP_ENDPOINT``                                            gets ``/v1/traces``
``OTEL_SERVICE_NAME``                  ``tracing.service_name``              ``service.name``
                                                                             (default ``flink-agents``)
``OTEL_BSP_SCHEDULE_DELAY``            ``tracing.export_interval_ms``        export interval (ms, 5000)
``OTEL_EXPORTER_OTLP_TIMEOUT``          ``tracing.otlp.timeout_s``            one export's timeout (s, 10)
``OTEL_SDK_DISABLED=true``             (none)                                turns tracing off
=====================================  ====================================  ==========================

The rest (``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_RESOURCE_ATTRIBUTES``, the
other ``OTEL_BSP_*``: batch size, queue) the SDK reads itself. An environment variable wins over the option: it is the
operator's word on that machine.

Spans go through the SDK's ``BatchSpanProcessor`` (a queue and one export
thread per Python worker process, shared by its subtasks): a run never waits
on the network. After a batch exported successfully, each run's span ids in
it are marked in that run's journal (one ``TRACE_STEP`` entry per run and
batch), so a replay after a failover does not export them again
(``tracing``). An export that fails is the SDK's to log; its spans are not
marked, so a replay of their run exports them again.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from flink_agents.runtime.features.tracing import SpanRecord
from flink_agents.stores.journal import TRACE_STEP, JournalEntry

__all__ = ["JobTracing", "OtelSink", "flush_all", "job_tracing", "open_sink", "tracing_requested"]

log = logging.getLogger(__name__)

_OFF = {"", "none"}


def _setting(env: Mapping[str, str], config: Mapping[str, Any], names: Sequence[str], option: str) -> Optional[str]:
    for name in names:
        value = env.get(name)
        if value:
            return value.strip()
    value = config.get(option)
    return None if value is None else str(value).strip()


def tracing_requested(config: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Optional[str]:
    """The exporter asked for (``otlp`` or ``console``), or None: tracing off.

    Raises:
        ValueError: An exporter other than ``otlp``, ``console`` or ``none``
            (names the setting).
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    value = _setting(env, config, ["OTEL_TRACES_EXPORTER"], "tracing.exporter")
    if value is None or value.lower() in _OFF:
        return None
    exporters = [v.strip().lower() for v in value.split(",") if v.strip().lower() not in _OFF]
    for exporter in exporters:
        if exporter not in ("otlp", "console"):
            raise ValueError(f"OTEL_TRACES_EXPORTER / tracing.exporter: {exporter!r} is not supported; "
                             "expected otlp, console or none")
    return exporters[0] if exporters else None


def _export_timeout_s(env: Mapping[str, str], config: Mapping[str, Any]) -> float:
    """One export's timeout, retries included (seconds): the OTLP exporter's
    ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`` / ``OTEL_EXPORTER_OTLP_TIMEOUT``
    (seconds in this SDK), else ``tracing.otlp.timeout_s``, else 10."""
    value = _setting(env, config, ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"],
                     "tracing.otlp.timeout_s")
    return float(value) if value else 10.0


def _schedule_delay_ms(env: Mapping[str, str], config: Mapping[str, Any]) -> float:
    """The batch processor's export interval (ms): ``OTEL_BSP_SCHEDULE_DELAY``,
    else ``tracing.export_interval_ms``, else the SDK's 5000."""
    value = _setting(env, config, ["OTEL_BSP_SCHEDULE_DELAY"], "tracing.export_interval_ms")
    return float(value) if value else 5000.0


def _traces_url(endpoint: str, per_signal: bool) -> str:
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` is a base URL: the traces path is
    appended (the specification's rule); the per-signal variable is used as is."""
    if per_signal:
        return endpoint
    return endpoint.rstrip("/") + "/v1/traces"


def _exporter(kind: str, env: Mapping[str, str], config: Mapping[str, Any]) -> Any:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    protocol = (_setting(env, config, ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"],
                         "tracing.otlp.protocol") or "http/protobuf").lower()
    per_signal = bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    endpoint = _setting(env, config, ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"],
                        "tracing.otlp.endpoint")
    if protocol == "http/protobuf":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ModuleNotFoundError(
                "traces over OTLP/HTTP need opentelemetry-exporter-otlp-proto-http: pip install 'flink-agents-runtime[otel]'"
            ) from None

        # Without an endpoint the exporter reads its own default (localhost:4318).
        return OTLPSpanExporter(endpoint=_traces_url(endpoint, per_signal) if endpoint else None,
                                timeout=_export_timeout_s(env, config))
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError:
            raise ValueError("OTLP protocol grpc needs opentelemetry-exporter-otlp-proto-grpc installed") from None
        return GrpcExporter(endpoint=endpoint) if endpoint else GrpcExporter()
    raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL / tracing.otlp.protocol: {protocol!r} is not supported; "
                     "expected http/protobuf or grpc")


class _MarkingExporter:
    """Exports through ``inner``, then marks each run's exported span ids in
    its journal (module docstring)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._runs: Dict[int, Tuple[Any, str, str, int]] = {}  # span id -> where its mark goes

    def note(self, run: Tuple[Any, str, str, int], spans: List[SpanRecord]) -> None:
        with self._lock:
            for span in spans:
                self._runs[span.span_id] = run

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        result = self._inner.export(spans)
        with self._lock:
            runs = [(span.context.span_id, span.parent is None, self._runs.pop(span.context.span_id, None))
                    for span in spans]
        if result != SpanExportResult.SUCCESS:
            return result
        by_run: Dict[Tuple[int, str, str, int], List[int]] = {}
        with_root: set[Tuple[int, str, str, int]] = set()
        stores: Dict[int, Any] = {}
        for span_id, is_root, run in runs:
            if run is None or run[0] is None:
                continue
            stores[id(run[0])] = run[0]
            key = (id(run[0]), run[1], run[2], run[3])
            by_run.setdefault(key, []).append(span_id)
            if is_root:
                with_root.add(key)
        for run_key, span_ids in by_run.items():
            store_id, journal_id, key_text, seq = run_key
            ids = sorted(f"{s:016x}" for s in span_ids)
            # One mark per run and batch; its ordinal from its content, so
            # marking the same spans again replaces the row (appends are
            # upserts). "root": the run's trace is complete (recovery looks
            # for finished runs without one).
            ordinal = int(ids[0][:7], 16)
            try:
                stores[store_id].append(journal_id, key_text, seq, [JournalEntry(
                    TRACE_STEP, ordinal, "root" if run_key in with_root else "", "", json.dumps({"spans": ids}))])
            except Exception as error:  # the spans went out; without the mark a replay may send them again
                log.warning("could not mark %d exported span(s) of run %s/%s#%d: %r",
                            len(ids), journal_id, key_text, seq, error)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        flush = getattr(self._inner, "force_flush", None)
        return True if flush is None else bool(flush(timeout_millis))


class OtelSink:
    """One per Python worker process and configuration: spans to ReadableSpans,
    through a ``BatchSpanProcessor`` to the configured exporter.

    Args:
        kind: ``otlp`` or ``console`` (``tracing_requested``).
        config: The job's configuration (``tracing.*`` options).
        env: The environment (default ``os.environ``).
    """

    def __init__(self, kind: str, config: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        env = os.environ if env is None else env
        attributes = {}
        if not env.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = str(config.get("tracing.service_name") or "flink-agents")
        self._resource = Resource.create(attributes)  # reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
        self._scope = InstrumentationScope("flink_agents", "0.1.0")
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        self._api = (ReadableSpan, SpanContext, SpanKind, Status, StatusCode)  # imported once, not per span
        self._sampled = TraceFlags(TraceFlags.SAMPLED)
        self._unset = Status(StatusCode.UNSET)
        self._exporter = _MarkingExporter(_exporter(kind, env, config))
        self.schedule_delay_ms = _schedule_delay_ms(env, config)
        self.export_timeout_s = _export_timeout_s(env, config)
        self._processor = BatchSpanProcessor(self._exporter, schedule_delay_millis=self.schedule_delay_ms)
        self.spans_exported = 0

    def export(self, run: Tuple[Any, str, str, int], spans: List[SpanRecord]) -> None:
        """Queue ``spans`` of ``run`` for export (see ``tracing.SpanSink``)."""
        self._exporter.note(run, spans)
        for span in spans:
            self._processor.on_end(self._readable(span))
            self.spans_exported += 1

    def _readable(self, span: SpanRecord) -> Any:
        ReadableSpan, SpanContext, SpanKind, Status, StatusCode = self._api
        flags = self._sampled
        context = SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=flags)
        parent = (None if span.parent_id is None
                  else SpanContext(span.trace_id, span.parent_id, is_remote=False, trace_flags=flags))
        status = Status(StatusCode.ERROR, span.error) if span.error is not None else self._unset
        return ReadableSpan(
            name=span.name, context=context, parent=parent, resource=self._resource,
            attributes=span.attributes, kind=SpanKind.CLIENT if span.kind == "client" else SpanKind.INTERNAL,
            status=status, start_time=span.start_ns, end_time=span.end_ns, instrumentation_scope=self._scope,
        )

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export what is queued now; whether it all went out in time."""
        return bool(self._processor.force_flush(int(timeout_s * 1000)))

    def shutdown(self) -> None:
        self._processor.shutdown()


_RECOVERY_LIMIT = 100_000  # runs recovered per start at most


_SINKS: Dict[Tuple[Any, ...], OtelSink] = {}
_SINKS_LOCK = threading.Lock()


def open_sink(config: Mapping[str, Any]) -> Optional[OtelSink]:
    """The process's sink for ``config``'s tracing settings, or None when
    tracing is off. Subtasks in one worker process share it (one export
    thread); it is flushed at the process's exit.

    Raises:
        ValueError: An unsupported exporter or protocol.
        ModuleNotFoundError: Tracing asked for without the ``[otel]`` extra
            (the message names it).
    """
    kind = tracing_requested(config)
    if kind is None:
        return None
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        raise ModuleNotFoundError(
            "tracing is on (OTEL_TRACES_EXPORTER / tracing.exporter) but the OpenTelemetry SDK is not installed: "
            "pip install 'flink-agents-runtime[otel]'") from None
    settings = (kind, *(config.get(k) for k in ("tracing.otlp.protocol", "tracing.otlp.endpoint",
                                                "tracing.service_name", "tracing.export_interval_ms",
                                                "tracing.otlp.timeout_s")),
                *(os.environ.get(k) for k in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL",
                                              "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT",
                                              "OTEL_SERVICE_NAME", "OTEL_BSP_SCHEDULE_DELAY",
                                              "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")))
    with _SINKS_LOCK:
        sink = _SINKS.get(settings)
        if sink is None:
            sink = _SINKS[settings] = OtelSink(kind, config)
            atexit.register(sink.shutdown)
        return sink


def flush_all(timeout_s: float = 30.0) -> bool:
    """Flush every sink of the process (a job's end, tests)."""
    with _SINKS_LOCK:
        sinks = list(_SINKS.values())
    return all(sink.flush(timeout_s) for sink in sinks)


class JobTracing:
    """A job's tracing in one engine: its span settings and the process's sink.

    Built by ``job_tracing``; ``for_run`` gives each run its ``RunTrace``.
    """

    def __init__(self, settings: Any, sink: OtelSink) -> None:
        self.settings = settings
        self.sink = sink

    def for_run(self, store: Any, journal_id: str, key_text: str, seq: int, key: Any) -> Any:
        """The ``RunTrace`` of one record's run."""
        from flink_agents.runtime.features.tracing import RunTrace

        return RunTrace(self.settings, self.sink, (store, journal_id, key_text, seq), key)

    def start_recovery(self, store: Any, journal_id: str, window_s: float) -> "threading.Event":
        """Export, in a daemon thread, the spans that a worker's end lost:
        of runs of ``journal_id`` finished in the ``window_s`` seconds before
        now, those whose root span was never marked exported (their spans
        were queued when the worker died, or their export failed). It first
        waits one export interval and timeout (``recovery_delay_s``), so
        that runs finished just before now have had their marks written.
        Each such run's unmarked spans go out once, ``flink_agents.replayed``.
        Set the returned event to stop it (the engine's close).
        """
        stop = threading.Event()
        started = time.time()

        def recover() -> None:
            # One export interval and timeout, so that marks of spans queued
            # before the start are written before it looks.
            if stop.wait(self.sink.schedule_delay_ms / 1000.0 + self.sink.export_timeout_s + 1.0):
                return
            try:
                runs = store.runs_without_root_mark(journal_id, started - window_s, started, _RECOVERY_LIMIT)
                for key_text, seq in runs:
                    if stop.is_set():
                        return
                    entries = store.load_run(journal_id, key_text, seq)
                    marks = [entries.pop(slot) for slot in [s for s in entries if s[0] == TRACE_STEP]]
                    trace = self.for_run(store, journal_id, key_text, seq, json.loads(key_text))
                    trace.replayed(list(entries.values()), marks)
                if runs:
                    log.info("exported the lost spans of %d finished run(s) of journal %s", len(runs), journal_id)
            except Exception as error:  # housekeeping: the next start tries again
                log.warning("could not recover lost spans of journal %s: %r", journal_id, error)

        threading.Thread(target=recover, name="flink-agents-trace-recovery", daemon=True).start()
        return stop


def job_tracing(config: Mapping[str, Any], plan: Any, prices: Any) -> Optional[JobTracing]:
    """The job's tracing, or None when it is off (``tracing_requested``);
    ``prices`` (a ``usage.PriceTable``) gives spans their cost.

    Raises:
        ValueError, ModuleNotFoundError: As ``open_sink``.
    """
    sink = open_sink(config)
    if sink is None:
        return None
    from flink_agents.runtime.features.tracing import settings_of

    capture = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    if capture is None or not capture.strip():
        captured = bool(config.get("tracing.capture_message_content") or False)
    else:
        captured = capture.strip().lower() == "true"
    return JobTracing(settings_of(plan, captured, prices), sink)
