"""Every configuration option, declared in one place.

``AgentConfigOptions`` and ``AgentExecutionOptions`` carry Flink Agents
0.3.1's keys, types and defaults (its ``api/core_options.py``), so 0.3.1 code
such as ``config.set(AgentExecutionOptions.MAX_RETRIES, 5)`` or
``ctx.config.get(AgentExecutionOptions.ERROR_HANDLING_STRATEGY)`` works here.
``RuntimeOptions`` declares this runtime's own options (journal store,
concurrency, callbacks, steering, progress, timeouts). They live in this one
module, beside 0.3.1's, so one table (``docs/operations.md``, "Configuration
options") lists every key and a key's two spellings are declared together:
where 0.3.1 and this runtime name one setting differently (``job-identifier``
and ``job_id``, ``short-term-memory.state-ttl.ms`` and
``short_term_memory.ttl_s``, ``error-handling-strategy`` and
``error_strategy``, ``max-retries`` and ``error_retry.max_attempts``,
``retry-wait-interval`` and ``error_retry.initial_backoff_s``), each option
lists the other spelling as an alias with its unit conversion, and both
spellings set to different values are an error naming both keys.

The Kafka and Fluss action-state store options of 0.3.1 are declared so
0.3.1 code that sets them still runs, but nothing reads them: this runtime
journals into its own stores (``RuntimeOptions.JOURNAL_STORE``).
"""

from __future__ import annotations

import functools
import warnings
from enum import Enum
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Tuple

from flink_agents._suggest import close_matches
from flink_agents.api._prices import parse_prices
from flink_agents.api.configuration import ConfigAlias, ConfigOption, ReadableConfiguration, readable

__all__ = [
    "AgentConfigOptions",
    "AgentExecutionOptions",
    "ConditionEvaluationFailureStrategy",
    "ErrorHandlingStrategy",
    "EventLogLevel",
    "LoggerType",
    "MisspeltConfigKeyWarning",
    "MemoryEventOptions",
    "RuntimeOptions",
    "ShortTermMemoryTtlUpdate",
    "ShortTermMemoryTtlVisibility",
    "all_options",
    "misspelt_keys",
    "spellings_of",
    "validate_options",
]


class ErrorHandlingStrategy(Enum):
    """What happens when an action fails (0.3.1's enum; ``SKIP`` is this
    runtime's name for ``IGNORE``).

    ``FAIL`` fails the record and so the job; ``RETRY`` runs the action again
    with exponential backoff (``max-retries``, ``retry-wait-interval``), then
    fails; ``IGNORE`` drops the record's run and emits an error record to the
    error side output. In 0.3.1 the strategy covers the built-in chat action
    only; here it covers every action.
    """

    RETRY = "retry"
    FAIL = "fail"
    IGNORE = "ignore"
    SKIP = "ignore"  # an alias of IGNORE: this runtime's ``error_strategy: skip``
    PARK = "park"  # this runtime's: retry, then keep the record queued and pause its key (run control)


class ShortTermMemoryTtlUpdate(Enum):
    """When the short-term memory TTL restarts (0.3.1's enum)."""

    ON_CREATE_AND_WRITE = "ON_CREATE_AND_WRITE"
    ON_READ_AND_WRITE = "ON_READ_AND_WRITE"


class ShortTermMemoryTtlVisibility(Enum):
    """Whether expired short-term memory not yet cleaned up is still read (0.3.1's enum)."""

    NEVER_RETURN_EXPIRED = "NEVER_RETURN_EXPIRED"
    RETURN_EXPIRED_IF_NOT_CLEANED_UP = "RETURN_EXPIRED_IF_NOT_CLEANED_UP"


class LoggerType(Enum):
    """Built-in event logger types (0.3.1's enum)."""

    SLF4J = "slf4j"
    FILE = "file"


class ConditionEvaluationFailureStrategy(Enum):
    """What happens when a trigger condition expression fails on an event
    (Flink Agents HEAD's enum): ``WARN_AND_SKIP`` logs a warning and counts
    the condition as false; ``FAIL`` fails the record."""

    WARN_AND_SKIP = "WARN_AND_SKIP"
    FAIL = "FAIL"


class EventLogLevel(Enum):
    """How much of each event the event log records (0.3.1's enum)."""

    OFF = "OFF"
    STANDARD = "STANDARD"
    VERBOSE = "VERBOSE"


def _positive(value: float) -> bool:
    return value > 0


def _non_negative(value: float) -> bool:
    return value >= 0


def _valid_prices(prices: Mapping[str, Any]) -> bool:
    parse_prices(prices)  # raises ValueError naming the model and field
    return True


_NOT_USED = "Declared for 0.3.1 compatibility; not used: this runtime journals into its own stores (journal.store)."


def _strategy_name(strategy: ErrorHandlingStrategy) -> str:
    return "skip" if strategy is ErrorHandlingStrategy.IGNORE else strategy.value


class AgentConfigOptions:
    """Flink Agents 0.3.1's core options (event log, action-state store, job identity)."""

    EVENT_LOGGER_TYPE = ConfigOption(
        "eventLoggerType", LoggerType, LoggerType.SLF4J,
        description="Built-in event logger: 'file' writes JSON lines under baseLogDir; "
        "'slf4j' (0.3.1's default) goes to Python logging here. Setting baseLogDir selects 'file'.",
    )
    BASE_LOG_DIR = ConfigOption(
        "baseLogDir", str, None,
        description="Directory of the file event logger's files; setting it selects the file logger.",
    )
    PRETTY_PRINT = ConfigOption(
        "prettyPrint", bool, False, description="Write each logged event as indented multi-line JSON."
    )
    ACTION_STATE_STORE_BACKEND = ConfigOption("actionStateStoreBackend", str, None, description=_NOT_USED)
    KAFKA_BOOTSTRAP_SERVERS = ConfigOption("kafkaBootstrapServers", str, "localhost:9092", description=_NOT_USED)
    KAFKA_ACTION_STATE_TOPIC = ConfigOption("kafkaActionStateTopic", str, None, description=_NOT_USED)
    KAFKA_ACTION_STATE_TOPIC_NUM_PARTITIONS = ConfigOption(
        "kafkaActionStateTopicNumPartitions", int, 64, description=_NOT_USED
    )
    KAFKA_ACTION_STATE_TOPIC_REPLICATION_FACTOR = ConfigOption(
        "kafkaActionStateTopicReplicationFactor", int, 1, description=_NOT_USED
    )
    FLUSS_BOOTSTRAP_SERVERS = ConfigOption("flussBootstrapServers", str, "localhost:9123", description=_NOT_USED)
    FLUSS_ACTION_STATE_DATABASE = ConfigOption("flussActionStateDatabase", str, "flink_agents", description=_NOT_USED)
    FLUSS_ACTION_STATE_TABLE = ConfigOption("flussActionStateTable", str, None, description=_NOT_USED)
    FLUSS_ACTION_STATE_TABLE_BUCKETS = ConfigOption("flussActionStateTableBuckets", int, 64, description=_NOT_USED)
    FLUSS_SECURITY_PROTOCOL = ConfigOption("flussSecurityProtocol", str, "PLAINTEXT", description=_NOT_USED)
    FLUSS_SASL_MECHANISM = ConfigOption("flussSaslMechanism", str, "PLAIN", description=_NOT_USED)
    FLUSS_SASL_JAAS_CONFIG = ConfigOption("flussSaslJaasConfig", str, None, description=_NOT_USED)
    FLUSS_SASL_USERNAME = ConfigOption("flussSaslUsername", str, None, description=_NOT_USED)
    FLUSS_SASL_PASSWORD = ConfigOption("flussSaslPassword", str, None, description=_NOT_USED)
    JOB_IDENTIFIER = ConfigOption(
        "job-identifier", str, None,
        aliases=("job_id",),
        check=lambda value: "/" not in value,
        requirement="must not contain '/' (it separates a sub-agent's journal id from its parent's)",
        description="Journal namespace of the job: keep it across restarts and savepoints so a "
        "restored job finds its journal; give every job sharing a journal store its own. Default: "
        "a fresh id per job ('local' for the in-memory journal of the local runner).",
    )
    EVENT_LOG_LEVEL = ConfigOption(
        "event-log.level", EventLogLevel, EventLogLevel.STANDARD,
        description="Event log verbosity: OFF, STANDARD (long strings, arrays and deep objects "
        "truncated) or VERBOSE (whole events); per event type with event-log.type.<TYPE>.level.",
    )
    EVENT_LOG_TRACE_ENABLED = ConfigOption(
        "event-log.trace.enabled", bool, False,
        description="Also write Flink Agents HEAD's trace records (action, model and tool executions "
        "started/finished/failed/reused) to the event log (runtime.features.trace_records).",
    )
    EVENT_LOG_MAX_STRING_LENGTH = ConfigOption(
        "event-log.standard.max-string-length", int, 2000, check=_non_negative, requirement="must be >= 0",
        description="At STANDARD, strings longer than this are truncated.",
    )
    EVENT_LOG_MAX_ARRAY_ELEMENTS = ConfigOption(
        "event-log.standard.max-array-elements", int, 20, check=_non_negative, requirement="must be >= 0",
        description="At STANDARD, arrays longer than this are truncated.",
    )
    EVENT_LOG_MAX_DEPTH = ConfigOption(
        "event-log.standard.max-depth", int, 5, check=_non_negative, requirement="must be >= 0",
        description="At STANDARD, objects nested deeper than this are summarized.",
    )
    EVENT_LISTENERS = ConfigOption(
        "event-listeners", list, None,
        description="Event listeners: import paths ('module:Class' or 'module.Class') of classes "
        "built without arguments, called for every event.",
    )
    CONDITION_EVALUATION_FAILURE_STRATEGY = ConfigOption(
        "action.trigger-condition.evaluate-failure-strategy", ConditionEvaluationFailureStrategy,
        ConditionEvaluationFailureStrategy.WARN_AND_SKIP,
        description="Flink Agents HEAD: when a trigger condition expression fails on an event (a missing "
        "attribute, a type mismatch), WARN_AND_SKIP logs a warning and counts it false; FAIL fails the record.",
    )


class AgentExecutionOptions:
    """Flink Agents 0.3.1's execution options (errors, threads, memory TTL)."""

    ERROR_HANDLING_STRATEGY = ConfigOption(
        "error-handling-strategy", ErrorHandlingStrategy, ErrorHandlingStrategy.FAIL,
        aliases=("error_strategy",),
        description="What a failing action does: fail (the job), retry (with backoff, then fail), "
        "ignore (skip the record; an error record goes to the error side output) or park (this runtime's: "
        "retry, then keep the record queued and pause its key until resumed). "
        "Here it covers every action; in 0.3.1 only the chat action.",
    )
    MAX_RETRIES = ConfigOption(
        "max-retries", int, 3,
        aliases=(ConfigAlias("error_retry.max_attempts", int, lambda attempts: attempts - 1, "attempts = retries + 1"),),
        check=_non_negative, requirement="must be >= 0",
        description="Retries after the first attempt under the retry strategy (also before skipping "
        "under ignore). When neither spelling is set, retry makes 3 attempts and ignore skips at the "
        "first failure.",
    )
    RETRY_WAIT_INTERVAL = ConfigOption(
        "retry-wait-interval", int, 1,
        aliases=(ConfigAlias("error_retry.initial_backoff_s", float, round),),
        check=_non_negative, requirement="must be >= 0",
        description="First wait between attempts in seconds; doubles each retry. When neither "
        "spelling is set the first wait is 0.1 s.",
    )
    NUM_ASYNC_THREADS = ConfigOption(
        "num-async-threads", int, None, check=_positive, requirement="must be >= 1",
        description="Threads for blocking user calls (sync tools, sync model connections, sync "
        "functions given to durable_execute_async). Default: max_concurrent_runs.",
    )
    CHAT_ASYNC = ConfigOption(
        "chat.async", bool, True,
        description="Accepted for 0.3.1 compatibility; the built-in chat action always runs "
        "the model call off the event loop here.",
    )
    TOOL_CALL_ASYNC = ConfigOption(
        "tool-call.async", bool, True,
        description="Accepted for 0.3.1 compatibility; the built-in tool action always runs sync "
        "tools off the event loop here.",
    )
    RAG_ASYNC = ConfigOption(
        "rag.async", bool, True, description="Accepted for 0.3.1 compatibility; not read here."
    )
    SHORT_TERM_MEMORY_STATE_TTL_MS = ConfigOption(
        "short-term-memory.state-ttl.ms", int, 0,
        aliases=(ConfigAlias("short_term_memory.ttl_s", float, lambda s: round(s * 1000), "seconds"),),
        check=_non_negative, requirement="must be >= 0 (0 turns TTL off)",
        description="Each short-term memory path of a key expires this long after its last write "
        "(or read, per the update type) (milliseconds; 0: never).",
    )
    SHORT_TERM_MEMORY_STATE_TTL_UPDATE_TYPE = ConfigOption(
        "short-term-memory.state-ttl.update-type", ShortTermMemoryTtlUpdate,
        ShortTermMemoryTtlUpdate.ON_READ_AND_WRITE,
        description="Whether an action's read of a memory path also restarts its TTL "
        "(Flink StateTtlConfig update type; the same rule on the local runner).",
    )
    SHORT_TERM_MEMORY_STATE_TTL_VISIBILITY = ConfigOption(
        "short-term-memory.state-ttl.visibility", ShortTermMemoryTtlVisibility,
        ShortTermMemoryTtlVisibility.NEVER_RETURN_EXPIRED,
        description="On Flink: whether expired memory not yet cleaned up is still read.",
    )
    AGENT_RUN_BEGIN_EVENT = ConfigOption(
        "agent-run.begin-event", bool, False,
        description="Flink Agents HEAD: send an AgentRunBeginEvent (the key's short-term memory values) "
        "before the first action of each run; journaled, so a replay sends the same snapshot.",
    )


class MemoryEventOptions:
    """Flink Agents HEAD's memory observation events (``api.events.memory_event``).

    Per operation kind: its own key if set, else ``memory.generate-event`` if
    set, else off. (HEAD's built-in default is on for writes and long-term
    operations; here every kind is opt-in, so 0.3 jobs journal and log the
    same events as before.)
    """

    MEMORY_GENERATE_EVENT = ConfigOption(
        "memory.generate-event", bool, None,
        description="Flink Agents HEAD: master switch of memory events, for the kinds not set one by one.",
    )
    SHORT_TERM_WRITE = ConfigOption(
        "memory.generate-event.short-term-write", bool, None,
        description="ShortTermWriteEvent: an action's short-term memory writes, path -> last value.",
    )
    SHORT_TERM_READ = ConfigOption(
        "memory.generate-event.short-term-read", bool, None,
        description="ShortTermReadEvent: an action's short-term memory reads, path -> last value read.",
    )
    SENSORY_WRITE = ConfigOption(
        "memory.generate-event.sensory-write", bool, None,
        description="SensoryWriteEvent: an action's sensory memory writes, path -> last value.",
    )
    SENSORY_READ = ConfigOption(
        "memory.generate-event.sensory-read", bool, None,
        description="SensoryReadEvent: an action's sensory memory reads, path -> last value read.",
    )
    LONG_TERM_UPDATE = ConfigOption(
        "memory.generate-event.long-term-update", bool, None,
        description="LongTermUpdateEvent: an action's long-term adds and deletes ({set: {id: text|null}}) "
        "and whole-set deletes (cleared_sets).",
    )
    LONG_TERM_GET = ConfigOption(
        "memory.generate-event.long-term-get", bool, None,
        description="LongTermGetEvent: the items an action's long-term gets returned ({set: {id: text}}).",
    )
    LONG_TERM_SEARCH = ConfigOption(
        "memory.generate-event.long-term-search", bool, None,
        description="LongTermSearchEvent: an action's long-term searches ({set: {query: [{id, value, score}]}}).",
    )


_STORES = ("sqlite", "memory", "postgres")


class RuntimeOptions:
    """This runtime's own options (no 0.3.1 counterpart, or this runtime's
    spelling of one: see the aliases)."""

    JOURNAL_STORE = ConfigOption(
        "journal.store", str, None, check=lambda kind: kind.strip().lower() in _STORES,
        requirement=f"must be one of {', '.join(repr(kind) for kind in _STORES)}",
        description="Journal store: sqlite (default on the Flink runner), memory (default on the "
        "local runner) or postgres.",
    )
    JOURNAL_SQLITE_PATH = ConfigOption(
        "journal.sqlite.path", str, "flink_agents_journal.db",
        description="SQLite journal file (made absolute on the client).",
    )
    JOURNAL_SQLITE_SHARED = ConfigOption(
        "journal.sqlite.shared", bool, False,
        description="Declare that journal.sqlite.path (absolute) is on storage every TaskManager "
        "host shares; without it a cluster submission refuses an SQLite journal.",
    )
    JOURNAL_POSTGRES_DSN = ConfigOption(
        "journal.postgres.dsn", str, None,
        description="PostgreSQL DSN of the journal; default the FLINK_AGENTS_POSTGRES_DSN environment variable.",
    )
    JOURNAL_POSTGRES_POOL_MIN_SIZE = ConfigOption(
        "journal.postgres.pool.min_size", int, 1, check=_non_negative, requirement="must be >= 0",
        description="PostgreSQL connections each Python worker process keeps open while idle.",
    )
    JOURNAL_POSTGRES_POOL_MAX_SIZE = ConfigOption(
        "journal.postgres.pool.max_size", int, 4, check=_positive, requirement="must be >= 1",
        description="PostgreSQL connections each Python worker process opens at most, shared by "
        "all its subtasks.",
    )
    JOURNAL_RETRY_TIMEOUT_S = ConfigOption(
        "journal.retry.timeout_s", float, 10.0, check=_non_negative, requirement="must be >= 0",
        description="How long a journal read or write rides out a store outage (seconds; 0: no retry).",
    )
    JOURNAL_RETRY_INITIAL_BACKOFF_S = ConfigOption(
        "journal.retry.initial_backoff_s", float, 0.05, check=_non_negative, requirement="must be >= 0",
        description="First wait between store retries (seconds; doubles).",
    )
    JOURNAL_RETRY_MAX_BACKOFF_S = ConfigOption(
        "journal.retry.max_backoff_s", float, 1.0, check=_non_negative, requirement="must be >= 0",
        description="Longest wait between store retries (seconds).",
    )
    JOURNAL_TRUSTED_PACKAGES = ConfigOption(
        "journal.trusted_packages", list, None,
        check=lambda names: all(isinstance(n, str) and all(p.isidentifier() for p in n.split(".")) for n in names),
        requirement="must be a list of package names (e.g. ['requests', 'google.adk'])",
        description="Packages whose classes journal rows and keyed state may name, beside the runtime's, "
        "the standard library's and those the agent's code reaches (docs/guarantees.md#security).",
    )
    JOURNAL_RETENTION_S = ConfigOption(
        "journal.retention_s", float, 1800.0, check=_non_negative, requirement="must be >= 0",
        description="Journal entries of finished records are pruned after this long (seconds). "
        "On Flink the default is raised to cover the checkpoint interval.",
    )
    JOURNAL_PRUNE_INTERVAL_S = ConfigOption(
        "journal.prune_interval_s", float, 60.0, check=_non_negative, requirement="must be >= 0",
        description="How often the journal is pruned (seconds).",
    )
    MAX_CONCURRENT_RUNS = ConfigOption(
        "max_concurrent_runs", int, 64, check=_positive, requirement="must be >= 1",
        description="Runs (keys) in flight at once per subtask.",
    )
    MAX_BACKLOG = ConfigOption(
        "flink.max_backlog", int, None, check=_positive, requirement="must be >= 1",
        description="Records accepted but not yet running per subtask before input is held back "
        "(default 16 x max_concurrent_runs).",
    )
    INLINE_WAIT_MS = ConfigOption(
        "flink.inline_wait_ms", float, 2.0, check=_non_negative, requirement="must be >= 0",
        description="Flink runner: how long an input record waits for its run to finish before "
        "the operator returns and polls later (milliseconds).",
    )
    POLL_INTERVAL_MS = ConfigOption(
        "flink.poll_interval_ms", int, 100, check=_positive, requirement="must be >= 1",
        description="Flink runner: timer interval polling runs in flight (milliseconds).",
    )
    PARKED_POLL_INTERVAL_MS = ConfigOption(
        "flink.parked_poll_interval_ms", int, 1000, check=_positive, requirement="must be >= 1",
        description="Flink runner: poll interval of a key waiting on a callback (milliseconds).",
    )
    ERROR_STRATEGY = ConfigOption(
        "error_strategy", str, "fail",
        aliases=(ConfigAlias("error-handling-strategy", ErrorHandlingStrategy, _strategy_name),),
        check=lambda name: name in ("fail", "retry", "skip", "park"),
        requirement="must be one of 'fail', 'retry', 'skip', 'park'",
        description="Job-wide or per action (action_config): fail, retry, skip (0.3.1's ignore) or park "
                    "(retry, then keep the record queued and pause its key until resumed).",
    )
    ERROR_RETRY_MAX_ATTEMPTS = ConfigOption(
        "error_retry.max_attempts", int, None,
        aliases=(ConfigAlias("max-retries", int, lambda retries: retries + 1, "retries = attempts - 1"),),
        check=_positive, requirement="must be >= 1",
        description="Attempts, counting the first run (default 3 under retry, 1 under skip).",
    )
    ERROR_RETRY_INITIAL_BACKOFF_S = ConfigOption(
        "error_retry.initial_backoff_s", float, 0.1,
        aliases=(ConfigAlias("retry-wait-interval", int),),
        check=_non_negative, requirement="must be >= 0",
        description="First wait between attempts (seconds; doubles each attempt).",
    )
    ERROR_RETRY_MAX_BACKOFF_S = ConfigOption(
        "error_retry.max_backoff_s", float, 10.0, check=_non_negative, requirement="must be >= 0",
        description="Longest wait between attempts (seconds).",
    )
    ACTION_TIMEOUT_S = ConfigOption(
        "action.timeout_s", float, None, check=_positive, requirement="must be a positive number of seconds",
        description="Job-wide timeout of async actions (seconds); per action 'timeout_s' in action_config.",
    )
    CHAT_MAX_TOOL_ROUNDS = ConfigOption(
        "chat.max_tool_rounds", int, 16, check=_positive, requirement="must be >= 1",
        description="Model calls the built-in chat action makes for one request before it fails.",
    )
    CHAT_OUTPUT_SCHEMA_MAX_RETRIES = ConfigOption(
        "chat.output_schema.max_retries", int, 2, check=_non_negative, requirement="must be >= 0",
        description="Times the built-in chat action re-asks a model whose final answer does not match "
        "the request's output schema, before the request fails with StructuredOutputError.",
    )
    CALLBACKS_BASE_URL = ConfigOption(
        "callbacks.base_url", str, None,
        description="Base URL of the callback ingress in callback URLs; default the "
        "CALLBACK_BASE_URL environment variable, else http://127.0.0.1:8089.",
    )
    CALLBACKS_SIGNING_KEY_FILE = ConfigOption(
        "callbacks.signing_key_file", str, None,
        description="File holding the key callback URLs are signed with (the ingress's "
        "callbacks.ingress.signing_key_file); default the FLINK_AGENTS_CALLBACK_SIGNING_KEY "
        "environment variable, else URLs are not signed.",
    )
    CALLBACKS_POLL_INTERVAL_MS = ConfigOption(
        "callbacks.poll_interval_ms", float, 100.0, check=_positive, requirement="must be > 0",
        description="How often pending callbacks are polled in the store (milliseconds).",
    )
    RUN_CONTROL_ENABLED = ConfigOption(
        "run_control.enabled", bool, True,
        description="Apply run-control requests (pause, resume, cancel, retry: `flink-agents runs ...`, the web "
                    "inspector) read from the journal store (runtime.features.run_control).",
    )
    RUN_CONTROL_POLL_INTERVAL_MS = ConfigOption(
        "run_control.poll_interval_ms", float, 1000.0, check=_positive, requirement="must be > 0",
        description="How often each subtask reads new run-control requests from the store (milliseconds).",
    )
    # Tool calls that wait for a reviewer (runtime.features.approvals;
    # docs/callbacks.md, "Approvals").
    APPROVALS_TIMEOUT_S = ConfigOption(
        "approvals.timeout_s", float, 3600.0,
        check=lambda seconds: 1 <= seconds <= 86_400, requirement="must be within 1 and 86400 seconds",
        description="How long a tool call needing approval waits for a reviewer's decision (seconds, "
        "within the callback limits, 1 s to 24 h); then approvals.on_timeout applies.",
    )
    APPROVALS_ON_TIMEOUT = ConfigOption(
        "approvals.on_timeout", str, "reject",
        check=lambda policy: policy in ("reject", "fail"), requirement="must be 'reject' or 'fail'",
        description="What a tool call whose approval timed out gets: 'reject' (the tool does not run, the "
        "model is told no decision came within the timeout) or 'fail' (the action fails with "
        "ApprovalTimedOut naming the tool and the call).",
    )
    APPROVALS_TOOLS = ConfigOption(
        "approvals.tools", list, None,
        check=lambda names: all(isinstance(name, str) for name in names),
        requirement="must be a list of tool names",
        description="Names of tools whose calls need a reviewer's approval, beside those marked "
        "@tool(needs_approval=True) (or a tool's needs_approval attribute).",
    )
    RUN_CONTROL_KEEP_FAILED = ConfigOption(
        "run_control.keep_failed", int, 0, check=lambda n: n >= 0, requirement="must be >= 0",
        description="Records of a key that ended on the error stream kept in keyed state for `runs retry` "
                    "(the newest N; 0, the default: none, and no timer for them).",
    )
    RUN_CONTROL_KEEP_FAILED_S = ConfigOption(
        "run_control.keep_failed_s", float, 3600.0, check=_positive, requirement="must be > 0",
        description="How long a record that ended on the error stream stays retryable (seconds).",
    )
    RUN_CONTROL_RETRY_POLL_INTERVAL_MS = ConfigOption(
        "run_control.retry_poll_interval_ms", float, 5000.0, check=_positive, requirement="must be > 0",
        description="On Flink, how often a key holding retryable records is called to take a retry request "
                    "(a processing-time timer of the key while it holds some).",
    )
    PROGRESS_ENABLED = ConfigOption(
        "progress.enabled", bool, False,
        description="Emit the progress stream (set by progress_stream()/to_progress_list()).",
    )
    STEERING_ENABLED = ConfigOption(
        "steering.enabled", bool, False, description="Accept steering messages (set by with_steering())."
    )
    # Traces (runtime.features.tracing, otel_export): the OTEL_* environment
    # variables win; these say it where a worker's environment cannot.
    TRACING_EXPORTER = ConfigOption(
        "tracing.exporter", str, None,
        description="Trace exporter when OTEL_TRACES_EXPORTER is not set: otlp, console or none (default: "
        "no traces).",
    )
    TRACING_OTLP_ENDPOINT = ConfigOption(
        "tracing.otlp.endpoint", str, None,
        description="OTLP receiver base URL when OTEL_EXPORTER_OTLP_ENDPOINT is not set (/v1/traces is appended).",
    )
    TRACING_OTLP_PROTOCOL = ConfigOption(
        "tracing.otlp.protocol", str, None,
        description="OTLP protocol when OTEL_EXPORTER_OTLP_PROTOCOL is not set: http/protobuf (default) or grpc.",
    )
    TRACING_SERVICE_NAME = ConfigOption(
        "tracing.service_name", str, None,
        description="service.name of the traces when OTEL_SERVICE_NAME is not set (default flink-agents).",
    )
    TRACING_EXPORT_INTERVAL_MS = ConfigOption(
        "tracing.export_interval_ms", float, None,
        description="How often queued spans are exported (ms) when OTEL_BSP_SCHEDULE_DELAY is not set "
        "(default 5000).",
    )
    TRACING_OTLP_TIMEOUT_S = ConfigOption(
        "tracing.otlp.timeout_s", float, None,
        description="One OTLP export's timeout, retries included (seconds), when OTEL_EXPORTER_OTLP_TIMEOUT "
        "is not set (default 10).",
    )
    TRACING_RECOVERY_WINDOW_S = ConfigOption(
        "tracing.recovery_window_s", float, 3600.0, check=lambda v: v >= 0, requirement="must be >= 0",
        description="At a job's (re)start, export the spans lost with a worker of runs finished this long "
        "before (seconds; 0: none).",
    )
    TRACING_CAPTURE_MESSAGE_CONTENT = ConfigOption(
        "tracing.capture_message_content", bool, None,
        description="Record model output and tool results in spans when "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is not set (default false; redacted of secrets).",
    )
    RATE_LIMITS = ConfigOption(
        "rate_limits", dict, None,
        description="Limits per model connection, held across the job's subtasks (rate_limits.scope: each takes "
        "limit // parallelism, or all share one job-wide window): {connection: {requests_per_minute, tokens_per_minute, max_concurrent_requests}}, or "
        "flat keys rate_limits.<connection>.<limit>; a connection's descriptor arguments of the same names win "
        "(docs/operations.md#rate-limits).",
    )
    RATE_LIMITS_SCOPE = ConfigOption(
        "rate_limits.scope", str, "subtask", check=lambda value: value in ("subtask", "job"),
        requirement="must be 'subtask' or 'job'",
        description="How rate limits are held across a job's subtasks: 'subtask' (each holds limit // parallelism "
        "on its own; no coordination, but a subtask left idle by key skew leaves its share unused) or 'job' "
        "(each request is also claimed from one job-wide window in the journal store, so the job as a whole gets "
        "the whole limit whichever subtasks are busy; one store round trip per request). max_concurrent_requests "
        "stays a per-subtask share either way. Per connection: rate_limits.<connection>.scope "
        "(docs/operations.md#rate-limits).",
    )
    USAGE_PRICES = ConfigOption(
        "usage.prices", dict, None, check=_valid_prices,
        requirement="must map each model to {input, output[, cached_input]} in USD per million tokens",
        description="Prices per model in USD per million tokens ({model: {input, output, cached_input}}): "
        "the cost of each model call, record and key (docs/durability.md#usage).",
    )
    # Budgets (runtime.features.budgets; docs/operations.md, "Budgets"):
    # checked before each model call; a record over one ends with BudgetExceeded.
    BUDGET_RECORD_MODEL_CALLS = ConfigOption(
        "budget.record.model_calls", int, None, check=_positive, requirement="must be >= 1",
        description="Model calls one record may make (its sub-agents' included); the next one is refused.",
    )
    BUDGET_RECORD_TOKENS = ConfigOption(
        "budget.record.tokens", int, None, check=_positive, requirement="must be >= 1",
        description="Tokens (input + output) one record may use; once reached, its next model call is refused.",
    )
    BUDGET_RECORD_COST_USD = ConfigOption(
        "budget.record.cost_usd", float, None, check=_positive, requirement="must be > 0",
        description="Cost in USD one record may reach (priced by usage.prices); once reached, its next model "
        "call is refused.",
    )
    BUDGET_KEY_TOKENS = ConfigOption(
        "budget.key.tokens", int, None, check=_positive, requirement="must be >= 1",
        description="Tokens one key's records may use per window (budget.key.window_s), kept in keyed state.",
    )
    BUDGET_KEY_COST_USD = ConfigOption(
        "budget.key.cost_usd", float, None, check=_positive, requirement="must be > 0",
        description="Cost in USD one key's records may reach per window (budget.key.window_s), kept in keyed "
        "state.",
    )
    BUDGET_KEY_WINDOW_S = ConfigOption(
        "budget.key.window_s", float, None, check=_positive, requirement="must be > 0",
        description="Length of a key budget's window (seconds): a fixed window from the first record counted "
        "in it; unset: the key's whole life.",
    )
    BUDGET_JOB_TOKENS = ConfigOption(
        "budget.job.tokens", int, None, check=_positive, requirement="must be >= 1",
        description="Tokens the job may use; each subtask takes tokens / parallelism and counts its own "
        "records since it (re)started.",
    )
    BUDGET_JOB_COST_USD = ConfigOption(
        "budget.job.cost_usd", float, None, check=_positive, requirement="must be > 0",
        description="Cost in USD the job may reach; each subtask takes cost_usd / parallelism and counts its "
        "own records since it (re)started.",
    )


_OPTION_CLASSES = (AgentConfigOptions, AgentExecutionOptions, MemoryEventOptions, RuntimeOptions)


def all_options() -> Tuple[Tuple[str, str, ConfigOption], ...]:
    """Every declared option as (class name, attribute name, option), in declaration order."""
    return tuple(
        (cls.__name__, name, value)
        for cls in _OPTION_CLASSES
        for name, value in vars(cls).items()
        if isinstance(value, ConfigOption)
    )


@functools.lru_cache(maxsize=1)
def _spelling_groups() -> Dict[str, FrozenSet[str]]:
    groups: Dict[str, set[str]] = {}
    for _, _, option in all_options():
        merged = set(option.keys)
        for key in option.keys:
            merged |= groups.get(key, set())
        for key in merged:
            groups[key] = merged
    return {key: frozenset(keys) for key, keys in groups.items()}


def spellings_of(key: str) -> FrozenSet[str]:
    """Every key that names the same setting as ``key`` (itself included);
    ``{key}`` for a key no option declares."""
    return _spelling_groups().get(key, frozenset({key}))


def validate_options(config: Mapping[str, Any]) -> ReadableConfiguration:
    """Check every declared option set in ``config``, so a bad value fails
    when the job starts rather than when the option is first read.

    Returns:
        ``config`` as a ``ReadableConfiguration``.

    Warns:
        MisspeltConfigKeyWarning: For each key that is no option but close
            to one (``misspelt_keys``), naming it and the likely options; the
            key is kept, as Flink Agents 0.3.1 keeps unknown keys.

    Raises:
        ValueError: The first option whose value does not convert, fails its
            check, or is set under two spellings to different values (the
            message names the key or keys and the value).
    """
    view = readable(config)
    for _, _, option in all_options():
        view.get_optional(option)
    # One call site, one message per key: Python's default warning filter
    # shows it once per process, though every operator and engine validates.
    for key, matches in misspelt_keys(view).items():
        warnings.warn(MisspeltConfigKeyWarning(
            f"agent configuration key {key!r} is not an option; did you mean "
            + " or ".join(repr(m) for m in matches)
            + "? (kept as given: Flink Agents 0.3.1 keeps keys it does not know, for the job's own code)"
        ))
    return view


class MisspeltConfigKeyWarning(UserWarning):
    """An agent configuration key that is no declared option but close to
    one (``validate_options``): most likely a typo that leaves the option at
    its default. A warning, not an error: Flink Agents 0.3.1 accepts any key
    (a job's own code may read its own keys with ``get_str``)."""


def _known_keys() -> Tuple[FrozenSet[str], Tuple[str, ...]]:
    """Every declared spelling (these options, and long-term memory's), and
    the keys of ``dict`` options, whose flat sub-keys (``rate_limits.<connection>.<limit>``)
    are theirs too."""
    from flink_agents.api.memory.long_term_memory import LongTermMemoryOptions

    options = [option for _, _, option in all_options()]
    options += [LongTermMemoryOptions.VECTOR_STORE, *(
        value for value in vars(LongTermMemoryOptions.Mem0).values() if isinstance(value, ConfigOption))]
    keys = frozenset(key for option in options for key in option.keys)
    prefixes = tuple(option.key for option in options if option.get_type() is dict)
    return keys, prefixes


# Stricter than difflib's 0.6: a job's own short keys ("limit") must not be
# taken for an option ("rate_limits"); a typo of a key of 8+ characters (a
# letter dropped, swapped or doubled) stays above it.
_KEY_CUTOFF = 0.8


def _is_sub_key(key: str, prefix: str) -> bool:
    """A flat key of a ``dict`` option: ``prefix.<name>.<field>`` (a name
    may itself hold dots, ``usage.prices.gpt-4.1.input``)."""
    return key.startswith(prefix + ".") and key[len(prefix) + 1:].count(".") >= 1


def _under_prefix(key: str, prefix: str) -> str | None:
    """``key`` with its head corrected to ``prefix`` when the head (as many
    dotted parts as ``prefix`` has) is close to it and a sub-key follows."""
    width = prefix.count(".") + 1
    parts = key.split(".")
    if len(parts) <= width + 1 or not close_matches(".".join(parts[:width]), [prefix], cutoff=_KEY_CUTOFF):
        return None
    return ".".join([prefix, *parts[width:]])


def misspelt_keys(keys: Iterable[str]) -> Dict[str, List[str]]:
    """The keys of ``keys`` that name no option but are close to one (by
    ``difflib``), each with the up to two options it is closest to. A key
    under a ``dict`` option (``rate_limits.openai.tokens_per_minute``) is
    known; one whose head is close to such an option
    (``rate_limit.openai.tokens_per_minute``) is suggested with the head
    corrected. A key written with the config file's ``agent.`` section
    prefix or in another case (``agent.max-retries``, ``MAX-RETRIES``: what
    code sets is used as given) is suggested without them. Keys close to
    nothing (a job's own keys) are not reported.
    """
    known, prefixes = _known_keys()
    found: Dict[str, List[str]] = {}
    for key in keys:
        key = str(key)
        if key in known or any(_is_sub_key(key, prefix) for prefix in prefixes):
            continue
        # Keys are case-sensitive and written without the YAML section's
        # ``agent.`` prefix: ``agent.max-retries`` or ``MAX-RETRIES`` given in
        # code is the option ``max-retries`` (left at its default).
        plain = key[len("agent."):] if key.startswith("agent.") else key
        meant = next((form for form in (plain, plain.lower()) if form in known or any(
            _is_sub_key(form, prefix) for prefix in prefixes)), None)
        corrected = [meant] if meant is not None else [
            fixed for fixed in (_under_prefix(plain, prefix) for prefix in prefixes) if fixed]
        matches = corrected[:1] or close_matches(plain, known, n=2, cutoff=_KEY_CUTOFF)
        if matches:
            found[key] = matches
    return found
