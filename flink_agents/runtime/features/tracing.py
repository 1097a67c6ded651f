"""Traces of every run, built from what the journal committed.

One trace per record's run, on the OpenTelemetry GenAI semantic conventions
(``gen_ai.*``, semantic-conventions 1.37+)::

    invoke_agent <agent>                 the run: key, seq, journal id, outcome, usage, cost
    ├── <action>                          one per step (action invocation), failed attempts
    │   ├── chat <model>                  a model call: provider, request/response model, tokens, finish reasons
    │   ├── execute_tool <tool>           a tool call: name, call id
    │   ├── invoke_agent <framework agent> an agent framework's turn (its model and tool calls under it)
    │   ├── invoke_agent <sub-agent>      a sub-agent call
    │   ├── retrieval <store> / embeddings <model> / memory <set>.<op> / durable_call <function>
    │   └── await_callback <purpose>      a wait on a durable callback

**Emitted after commit.** A span is built from journal entries only once the
commit that wrote them landed (``RunJournal``'s ``on_commit``), with the
times the journal holds (``"t"``: ``journal.timed``), so nothing a failover
can undo is ever reported: a model reply that was not durable could come out
differently when asked again. A step's span goes out with its completion,
a run's root with its run end. An attempt that fails without ending the run
(its record fails the job, whose restart replays it, or is parked until
resumed) is a ``failed_attempt`` span under the root, with its error: a
root saying "failed" would be undone when a replay ends the run (and that
run's own root, with the same id, would then never go out).

**Ids from the run's identity.** The trace id is derived from (journal id,
key, record sequence number), each span id from the trace id and the
position it reports (step, ordinal), never from time or randomness: the
record whose run was interrupted by a failover and replayed has one trace,
and a span exported again has the same id. A replay does not export again
what was exported before: once an exporter confirmed a batch, the span ids
are marked in the run's journal (``TRACE_STEP`` entries, ``otel_export``);
a replay exports only the spans of journaled steps that carry no mark (their
export was lost with the worker), with ``flink_agents.replayed = true``.
OTLP has no idempotent write, so the narrow window between an exporter's
success and its mark (one store write) can still export a span twice, with
the same id and content: a backend that keys spans by id shows it once.

**Usage counted once.** The root span carries the run's totals, summed over
its journaled model calls by position, whichever attempt made them.

**Content.** Model output (``gen_ai.output.messages``) and tool results
(``gen_ai.tool.call.result``) are recorded only when the user opts in with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (or
``tracing.capture_message_content``), as the conventions ask, and are always
redacted of callback capabilities (``capability_redaction``) and of secrets
(``api.redaction``'s rule: secret-named fields, URL passwords, bearer
credentials). A built-in model call's messages (``gen_ai.input.messages``)
are not journaled (only their digest): they are noted as the call is made
(``note_prompt``), so a span a replay exports has none.

This module builds spans (``SpanRecord``); ``otel_export`` hands them to the
OpenTelemetry SDK. With tracing off the engine builds no ``RunTrace``: the
record path pays one ``is None`` test per run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Protocol, Tuple

from flink_agents.runtime.durability.call_started import is_started
from flink_agents.runtime.durability.codec import plain_json
from flink_agents.runtime.execution.usage import PriceTable, Usage, usage_of_reply
from flink_agents.api.redaction import redact as redact_secrets
from flink_agents.runtime.features.capability_redaction import redact as redact_capabilities
from flink_agents.stores.journal import COMPLETION, FAILED_ATTEMPTS, RUN_END, RUN_STEP, JournalEntry

__all__ = ["RunTrace", "SpanRecord", "SpanSink", "TraceSettings", "span_id_of", "trace_id_of"]

log = logging.getLogger(__name__)

_MAX_CONTENT_CHARS = 8192  # a captured content attribute is cut here (backends limit attribute size)


@dataclass
class SpanRecord:
    """One finished span, ready for an exporter.

    ``trace_id`` is 128 bits, ``span_id`` and ``parent_id`` 64 bits (the
    W3C Trace Context sizes); times are Unix nanoseconds; ``error`` is the
    status description of a failed unit (None: ok).
    """

    trace_id: int
    span_id: int
    parent_id: Optional[int]
    name: str
    kind: str  # "internal" or "client" (a call to a model provider)
    start_ns: int
    end_ns: int
    attributes: Dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None


class SpanSink(Protocol):
    """Where a run's spans go (``otel_export.OtelSink``)."""

    def export(self, run: Tuple[Any, str, str, int], spans: List[SpanRecord]) -> None:
        """Take ``spans`` of ``run`` (``(store, journal id, key text, seq)``,
        where their export marks go) for export; never blocks on the network."""


def _digest_int(bits: int, *parts: Any) -> int:
    text = "\x00".join(map(str, parts)).encode("utf-8", "surrogatepass")
    value = int.from_bytes(hashlib.blake2b(text, digest_size=bits // 8).digest(), "big")
    return value or 1  # 0 is the invalid id in OpenTelemetry


def trace_id_of(journal_id: str, key_text: str, seq: int) -> int:
    """The 128-bit trace id of one record's run."""
    return _digest_int(128, "trace", journal_id, key_text, seq)


def span_id_of(trace_id: int, *position: Any) -> int:
    """The 64-bit id of the span at ``position`` of a trace: ``("run",)``,
    ``("step", step)``, ``("call", step, ordinal)``, ``("turn", anchor)``,
    ``("callback", step, ordinal)``."""
    return _digest_int(64, trace_id, *position)


@dataclass(frozen=True)
class TraceSettings:
    """What spans hold, fixed per job.

    Attributes:
        agent_name: The root span's ``gen_ai.agent.name``.
        chat_models: Per chat model setup resource name: ``(request model,
            provider name)`` (``gen_ai.request.model``,
            ``gen_ai.provider.name``), either None where unknown.
        capture_content: Record model output and tool results (module docstring).
        prices: Cost per call and per run (``usage.prices``).
    """

    agent_name: str
    chat_models: Mapping[str, Tuple[Optional[str], Optional[str]]]
    capture_content: bool = False
    prices: PriceTable = field(default_factory=lambda: PriceTable(None))


def _times(payload: Mapping[str, Any]) -> Optional[Tuple[int, int]]:
    t = payload.get("t")
    if isinstance(t, list) and len(t) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in t):
        return t[0], t[0] + max(0, t[1])
    return None


def _action_step(step: str) -> str:
    """``"review@1/turn0/m2"`` -> ``"review@1"``: the step whose span is a
    call's parent (branch and turn positions are below it)."""
    return step.split("/", 1)[0]


def _content(value: Any) -> str:
    """Captured content as an attribute: secrets and callback capabilities
    redacted (``api.redaction``, ``capability_redaction``), then cut."""
    value = redact_secrets(redact_capabilities(value))
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= _MAX_CONTENT_CHARS else text[:_MAX_CONTENT_CHARS] + "...[truncated]"


class RunTrace:
    """The spans of one record's run (see the module docstring).

    Args:
        settings: The job's ``TraceSettings``.
        sink: Where finished spans go.
        run: ``(store, journal id, key text, seq)``: the run's identity, and
            where its export marks go.
        key: The key as the user's key selector gave it (for the root span).
        parent: ``(trace id, span id)`` of the sub-agent call this run is
            the child of (``child``): its spans go in that trace, under that
            span, and it has no root of its own. None for a record's run.
    """

    def __init__(
        self, settings: TraceSettings, sink: SpanSink, run: Tuple[Any, str, str, int], key: Any,
        parent: Optional[Tuple[int, int]] = None,
    ) -> None:
        self._settings = settings
        self._sink = sink
        self._run = run
        self._key = key
        if parent is None:
            self.trace_id = trace_id_of(run[1], run[2], run[3])
            self._root_id = span_id_of(self.trace_id, "run")
        else:
            self.trace_id, self._root_id = parent
        self._turns: Dict[str, Tuple[int, str]] = {}  # turn anchor -> (start ns, "framework/agent")
        self._tool_call_ids: Dict[str, List[str]] = {}  # tool name -> ids the model asked for, not yet matched
        self._started_ns: Optional[int] = None
        self._exported: set[int] = set()
        self._callbacks: List[Tuple[str, int, str, int, int, str]] = []  # waits ended, not yet emitted
        self._prompts: Dict[Tuple[str, int], Any] = {}  # model calls' messages (content capture)
        # The run's figures, kept as its entries pass (``_note``).
        self._noted: set[Tuple[str, int]] = set()
        self._failed_attempts: Dict[str, int] = {}
        self._turn_ends: Dict[str, int] = {}
        self._usage: Optional[Usage] = None
        self._cost: Optional[float] = None
        self._model_calls = 0
        self._tool_calls = 0
        self.root_emitted = False
        self.failures = 0  # errors building spans (logged)

    def _id(self, *position: Any) -> int:
        """The id of the span at ``position`` of this run (its journal id
        in it: a sub-agent's steps are named like its parent's)."""
        return span_id_of(self.trace_id, self._run[1], *position)

    def child(self, store: Any, journal_id: str, call_id: str) -> "RunTrace":
        """The trace of a sub-agent call's child run (journal ``journal_id``),
        nested under the call's span (``invoke_agent <sub-agent>``)."""
        return RunTrace(self._settings, self._sink, (store, journal_id, self._run[2], self._run[3]), self._key,
                        (self.trace_id, span_id_of(self.trace_id, "agent_call", call_id)))

    # -- what the engine calls ---------------------------------------------
    # Tracing never fails a run: an error building spans is logged and the
    # run goes on (its spans may then be missing, never wrong).

    def replayed(self, entries: Iterable[JournalEntry], marks: Iterable[JournalEntry]) -> None:
        """A replay opened the run's journal: export the spans of what it held
        that no mark says was exported, marked ``flink_agents.replayed``."""
        self._safely(self._replayed, list(entries), list(marks))

    def _safely(self, method: Callable[..., None], *args: Any) -> None:
        try:
            method(*args)
        except Exception as error:
            self.failures += 1
            log.warning("could not trace run %s/%s#%d: %r", self._run[1], self._run[2], self._run[3], error)

    def _replayed(self, entries: List[JournalEntry], marks: List[JournalEntry]) -> None:
        for mark in marks:
            try:
                self._exported.update(int(span, 16) for span in json.loads(mark.payload).get("spans", []))
            except (ValueError, TypeError, AttributeError):
                continue  # a mark that does not parse marks nothing: at worst a span goes out twice
        entries = sorted(entries, key=lambda e: (e.step == RUN_STEP, e.ordinal == COMPLETION, e.step, e.ordinal))
        self._send(self._spans_of(entries, self._completed_steps(entries)), replayed=True)

    def committed(self, entries: List[JournalEntry]) -> None:
        """A commit of ``entries`` landed: export their spans."""
        self._safely(self._committed, entries)

    def _committed(self, entries: List[JournalEntry]) -> None:
        self._send(self._spans_of(entries, self._completed_steps(entries)))

    @property
    def captures_content(self) -> bool:
        """Whether spans record message content (module docstring)."""
        return self._settings.capture_content

    def note_prompt(self, step: str, ordinal: int, messages: Any) -> None:
        """The messages a built-in model call at ``(step, ordinal)`` asks
        with, for its span's ``gen_ai.input.messages`` (content capture on;
        not journaled, so a span exported by a replay has none)."""
        self._prompts[(step, ordinal)] = messages

    def callback_waited(self, step: str, ordinal: int, purpose: str, created_ms: int, finished_ms: int,
                        state: str) -> None:
        """A wait on a callback ended (``state``); its span goes out with the
        commit of the step that waited."""
        self._callbacks.append((step, ordinal, purpose, created_ms, finished_ms, state))

    def ended_unwritten(self, entries: List[JournalEntry], outcome: str, ended_ns: int) -> None:
        """The run ended without writing its journal (it made no journaled
        call): its steps and root, from what it would have written."""
        self._safely(self._ended_unwritten, entries, outcome, ended_ns)

    def _ended_unwritten(self, entries: List[JournalEntry], outcome: str, ended_ns: int) -> None:
        ordered = sorted(entries, key=lambda e: (e.ordinal == COMPLETION, e.step, e.ordinal))
        spans = self._spans_of(ordered, self._completed_steps(ordered))
        spans.append(self._root(outcome, "skipped: an action failed" if outcome == "skipped" else None, ended_ns))
        self._send(spans)

    def failed(self, error: BaseException, ended_ns: int, outcome: str = "failed") -> None:
        """An attempt at the run failed (after its last commit) and the run
        did not end: the record fails the job, whose restart replays it, or
        it is parked (``outcome`` "parked") until resumed. A span under the
        root, with the error; the root goes out when a later attempt ends
        the run (module docstring)."""
        self._safely(self._failed, error, ended_ns, outcome)

    def _failed(self, error: BaseException, ended_ns: int, outcome: str) -> None:
        if self.root_emitted:
            return
        start = self._started_ns if self._started_ns is not None else ended_ns
        # Its id from the failure's time, unlike every other span's: it is
        # built once, as the attempt fails, from nothing journaled, so no
        # replay builds it again; each attempt that fails has its own.
        self._send([self._span(
            self._id("failed_attempt", ended_ns), self._root_id, "failed_attempt", (start, max(start, ended_ns)),
            {"flink_agents.key": str(self._key), "flink_agents.seq": self._run[3], "flink_agents.outcome": outcome},
            f"{type(error).__name__}: {error}",
        )])

    # -- building spans ------------------------------------------------------

    def _completed_steps(self, entries: Iterable[JournalEntry]) -> set[str]:
        return {e.step for e in entries if e.ordinal == COMPLETION}

    def _send(self, spans: List[SpanRecord], replayed: bool = False) -> None:
        fresh = [s for s in spans if s.span_id not in self._exported]
        if not fresh:
            return
        for span in fresh:
            self._exported.add(span.span_id)
            if replayed:
                span.attributes["flink_agents.replayed"] = True
        self._sink.export(self._run, fresh)

    def _span(self, span_id: int, parent: Optional[int], name: str, times: Tuple[int, int],
              attributes: Dict[str, Any], error: Optional[str] = None, kind: str = "internal") -> SpanRecord:
        if self._started_ns is None or times[0] < self._started_ns:
            self._started_ns = times[0]
        return SpanRecord(self.trace_id, span_id, parent, name, kind, times[0], times[1], attributes, error)

    def _spans_of(self, entries: List[JournalEntry], completed: set[str]) -> List[SpanRecord]:
        """The spans of ``entries`` (each entry of a run comes here once:
        committed, replayed or unwritten), parsing each payload once and
        keeping the run's running figures (start, usage, failed attempts,
        turn ends) for the spans that close later. Calls first, then step
        completions (a step's span closes over its calls), the run end last."""
        # A call's started mark is no span: the call's outcome, which replaces it, is.
        parsed = [(entry, json.loads(entry.payload)) for entry in entries if not is_started(entry)]
        for entry, payload in parsed:
            self._note(entry, payload)
        spans: List[SpanRecord] = []
        for entry, payload in parsed:
            if entry.step == RUN_STEP or entry.ordinal in (COMPLETION, FAILED_ATTEMPTS):
                continue
            if entry.function_id.startswith("turn:"):
                continue  # its span goes out with its step's completion (it has no end before)
            span = self._call_span(entry, payload)
            if span is not None:
                spans.append(span)
        for entry, payload in parsed:
            if entry.ordinal == COMPLETION:
                spans.extend(self._step_spans(entry, payload))
        for entry, payload in parsed:
            if entry.step == RUN_STEP and entry.ordinal == RUN_END:
                times = _times(payload)
                outcome = str(payload.get("outcome"))
                spans.append(self._root(outcome, "skipped: an action failed" if outcome == "skipped" else None,
                                        times[1] if times else None, times))
        return spans

    def _note(self, entry: JournalEntry, payload: Dict[str, Any]) -> None:
        """Keep what later spans need of ``entry`` (once per position)."""
        position = (entry.step, entry.ordinal)
        if position in self._noted:
            return
        self._noted.add(position)
        times = _times(payload)
        if times is not None and (self._started_ns is None or times[0] < self._started_ns):
            self._started_ns = times[0]
        if entry.ordinal == FAILED_ATTEMPTS:
            failed = payload.get("failed")
            self._failed_attempts[entry.step] = failed if isinstance(failed, int) else 0
            return
        kind = entry.function_id.partition(":")[0]
        if kind == "turn" and times is not None:
            self._turns[entry.step] = (times[0], entry.function_id[len("turn:"):])
        if times is not None:
            for anchor in self._turns:
                if entry.step.startswith(anchor + "/"):
                    self._turn_ends[anchor] = max(self._turn_ends.get(anchor, 0), times[1])
        if kind in ("tool", "mcp"):
            self._tool_calls += 1
        elif kind == "agent":  # a sub-agent's model calls: its tokens, journaled with its result
            self._add_usage(_sub_agent_tokens(payload), None)
        elif kind == "chat":
            self._model_calls += 1
            if "ok" in payload:
                reply = plain_json(payload["ok"])
                model, usage = usage_of_reply(reply) if isinstance(reply, Mapping) else (None, None)
                request_model = self._settings.chat_models.get(entry.function_id[len("chat:"):], (None, None))[0]
                self._add_usage(usage, self._settings.prices.cost(model or request_model, usage))

    def _add_usage(self, usage: Optional[Usage], cost: Optional[float]) -> None:
        if usage is not None:
            self._usage = usage if self._usage is None else self._usage + usage
        if cost is not None:
            self._cost = cost if self._cost is None else self._cost + cost

    def _parent_of(self, step: str) -> int:
        for anchor in self._turns:
            if step.startswith(anchor + "/"):
                return self._id("turn", anchor)
        return self._id("step", _action_step(step))

    def _step_spans(self, entry: JournalEntry, payload: Dict[str, Any]) -> List[SpanRecord]:
        times = _times(payload)
        if times is None:
            return []  # written by a release before step times: nothing to place it by
        step = entry.step
        step_id = self._id("step", step)
        action = step.split("@", 1)[0]
        attributes: Dict[str, Any] = {
            "flink_agents.action": action,
            "flink_agents.step": step,
            "flink_agents.events": [e.get("type", "").rpartition(":")[2] for e in payload.get("events", [])
                                    if isinstance(e, dict)],
        }
        failed = self._failed_attempts.get(step)
        if failed:
            attributes["flink_agents.failed_attempts"] = failed
        spans = [self._span(step_id, self._root_id, action, times, attributes)]
        # The step's framework turns end with it at the latest.
        for anchor, (start, name) in self._turns.items():
            if _action_step(anchor) != step:
                continue
            framework, _, agent = name.partition("/")
            spans.append(self._span(
                self._id("turn", anchor), step_id, f"invoke_agent {agent}",
                (start, self._turn_ends.get(anchor, times[1])),
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                 "flink_agents.framework": framework, "flink_agents.step": anchor},
            ))
        for wait in [w for w in self._callbacks if _action_step(w[0]) == step]:
            self._callbacks.remove(wait)
            wait_step, ordinal, purpose, created_ms, finished_ms, state = wait
            spans.append(self._span(
                self._id("callback", wait_step, ordinal), self._parent_of(wait_step),
                f"await_callback {purpose}", (created_ms * 1_000_000, finished_ms * 1_000_000),
                {"flink_agents.callback.purpose": purpose, "flink_agents.callback.state": state},
                None if state == "resolved" else f"callback {state}",
            ))
        return spans

    def _call_span(self, entry: JournalEntry, payload: Dict[str, Any]) -> Optional[SpanRecord]:
        times = _times(payload)
        if times is None:
            return None
        kind, _, name = entry.function_id.partition(":")
        error = None
        if "error" in payload:
            err = payload["error"]
            error = f"{str(err.get('type', '')).rpartition(':')[2]}: {err.get('message', '')}" \
                if isinstance(err, dict) else str(err)
        result = plain_json(payload.get("ok")) if "ok" in payload else None
        attributes: Dict[str, Any] = {"flink_agents.step": entry.step, "flink_agents.ordinal": entry.ordinal}
        if error is not None:
            attributes["error.type"] = error.split(":", 1)[0]
        span_kind = "internal"
        if kind == "chat":
            title, span_kind = self._chat_attributes(name, result, attributes), "client"
            prompt = self._prompts.pop((entry.step, entry.ordinal), None)
            if prompt is not None and self._settings.capture_content:
                attributes["gen_ai.input.messages"] = _content(_as_parts(prompt))
        elif kind in ("tool", "mcp"):
            tool = name.rpartition("/")[2] if kind == "mcp" else name
            title = f"execute_tool {tool}"
            attributes.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool})
            waiting = self._tool_call_ids.get(tool)
            if waiting:
                attributes["gen_ai.tool.call.id"] = waiting.pop(0)
            if self._settings.capture_content and "ok" in payload:
                attributes["gen_ai.tool.call.result"] = _content(result)
        elif kind == "agent":
            agent = name.rpartition(":")[2]
            title = f"invoke_agent {agent}"
            attributes.update({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent})
        elif kind == "vector_store":
            store = name.split("/", 1)[0].split(".", 1)[0]
            title = f"retrieval {store}"
            attributes.update({"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": store})
        elif kind == "embed":
            title = f"embeddings {name}"
            attributes.update({"gen_ai.operation.name": "embeddings", "gen_ai.request.model": name})
            span_kind = "client"
        elif kind == "ltm":
            title = f"memory {name.split('#', 1)[0]}"
        elif kind == "steering":
            if not result:
                return None  # a take that found nothing
            title = "steering"
            attributes["flink_agents.steering.messages"] = len(result) if isinstance(result, list) else 1
        else:
            title = f"durable_call {entry.function_id.rpartition(':')[2] or entry.function_id}"
            attributes["flink_agents.function"] = entry.function_id
        span_id = self._id("call", entry.step, entry.ordinal)
        if kind == "agent" and isinstance(result, Mapping) and isinstance(result.get("result"), Mapping) \
                and isinstance(result["result"].get("call_id"), str):
            # Its child run's spans hang under it (``child``), by its call id.
            span_id = span_id_of(self.trace_id, "agent_call", result["result"]["call_id"])
        return self._span(span_id, self._parent_of(entry.step), title, times, attributes, error, span_kind)

    def _chat_attributes(self, setup: str, reply: Any, attributes: Dict[str, Any]) -> str:
        request_model, provider = self._settings.chat_models.get(setup, (None, None))
        attributes["gen_ai.operation.name"] = "chat"
        attributes["flink_agents.chat_model"] = setup  # the setup resource (or framework/agent) called
        framework = setup.partition("/")[0] if "/" in setup else None
        if framework is not None:
            attributes["flink_agents.framework"] = framework
        if provider:
            attributes["gen_ai.provider.name"] = provider
        if request_model:
            attributes["gen_ai.request.model"] = request_model
        response_model, usage = usage_of_reply(reply) if isinstance(reply, Mapping) else (None, None)
        if response_model:
            attributes["gen_ai.response.model"] = response_model
        if usage is not None:
            attributes.update(_usage_attributes(usage))
            cost = self._settings.prices.cost(response_model or request_model, usage)
            if cost is not None:
                attributes["flink_agents.cost_usd"] = cost
        if isinstance(reply, Mapping):
            reasons = _finish_reasons(reply)
            if reasons:
                attributes["gen_ai.response.finish_reasons"] = reasons
            calls = reply.get("tool_calls") or []
            for call in calls if isinstance(calls, list) else []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and isinstance(function.get("name"), str) and call.get("id"):
                    self._tool_call_ids.setdefault(function["name"], []).append(str(call["id"]))
            if self._settings.capture_content:
                attributes["gen_ai.output.messages"] = _content([{
                    "role": "assistant",
                    "parts": [{"type": "text", "content": reply.get("content")}] + [
                        {"type": "tool_call", "id": c.get("id"), "name": (c.get("function") or {}).get("name"),
                         "arguments": (c.get("function") or {}).get("arguments")}
                        for c in (calls if isinstance(calls, list) else []) if isinstance(c, dict)
                    ],
                }])
        return f"chat {response_model or request_model or setup}"

    def _root(self, outcome: str, error: Optional[str], ended_ns: Optional[int],
              times: Optional[Tuple[int, int]] = None) -> SpanRecord:
        """The run's span: its figures summed over every entry noted, once each."""
        self.root_emitted = True
        starts = [v for v in (self._started_ns, times[0] if times else None) if v is not None]
        start = min(starts) if starts else (ended_ns or 0)
        end = ended_ns if ended_ns is not None else start
        attributes: Dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self._settings.agent_name,
            "flink_agents.key": str(self._key),
            "flink_agents.seq": self._run[3],
            "flink_agents.journal_id": self._run[1],
            "flink_agents.outcome": outcome,
            "flink_agents.model_calls": self._model_calls,
            "flink_agents.tool_calls": self._tool_calls,
        }
        if self._usage is not None:
            attributes.update(_usage_attributes(self._usage))
        if self._cost is not None:
            attributes["flink_agents.cost_usd"] = self._cost
        return SpanRecord(self.trace_id, self._root_id, None, f"invoke_agent {self._settings.agent_name}",
                          "internal", start, max(start, end), attributes, error)


def _usage_attributes(usage: Usage) -> Dict[str, int]:
    attributes = {"gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens}
    if usage.cached_input_tokens is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_input_tokens
    if usage.reasoning_tokens is not None:
        attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
    return attributes


def _finish_reasons(reply: Mapping[str, Any]) -> List[str]:
    """Finish reasons a reply reports: a built-in reply's ``extra_args``
    (``finish_reason``, Anthropic's ``stop_reason``), or a framework turn's
    stored ``finish_reasons``."""
    extra = reply.get("extra_args") if isinstance(reply.get("extra_args"), Mapping) else reply
    for name in ("finish_reasons", "finish_reason", "stop_reason"):
        value = extra.get(name)
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
    return []


# Provider names of the semantic conventions (``gen_ai.provider.name``), by
# the connection class's name.
_PROVIDERS = (("azure", "azure.ai.openai"), ("openai", "openai"), ("anthropic", "anthropic"),
              ("ollama", "ollama"), ("tongyi", "dashscope"), ("dashscope", "dashscope"))


def settings_of(plan: Any, capture_content: bool, prices: PriceTable) -> TraceSettings:
    """The ``TraceSettings`` of a compiled plan: its name, and for each chat
    model setup its ``model`` argument and its connection's provider."""
    from flink_agents.api.resource import ResourceType

    resources = plan.resources
    connections = resources.get(ResourceType.CHAT_MODEL_CONNECTION, {})
    chat_models: Dict[str, Tuple[Optional[str], Optional[str]]] = {}
    for name, spec in resources.get(ResourceType.CHAT_MODEL, {}).items():
        arguments = spec.descriptor.arguments if spec.descriptor is not None else {}
        model = arguments.get("model")
        connection = connections.get(str(arguments.get("connection")))
        clazz = (f"{connection.descriptor.target_module}.{connection.descriptor.target_clazz}".lower()
                 if connection is not None and connection.descriptor is not None else "")
        provider = next((value for needle, value in _PROVIDERS if needle in clazz), None)
        chat_models[name] = (model if isinstance(model, str) else None, provider)
    return TraceSettings(str(plan.agent).rpartition(".")[2], chat_models, capture_content, prices)


def _sub_agent_tokens(data: Mapping[str, Any]) -> Optional[Usage]:
    """The tokens a sub-agent call's child counted (``[action, model,
    prompt, completion[, cached, reasoning]]`` each,
    ``token_usage.sub_agent_tokens``), summed; None if it journaled none
    or they do not read (untrusted: nothing is raised for a trace)."""
    from flink_agents.runtime.execution.token_usage import sub_agent_tokens

    outcome = plain_json(data.get("ok")) if "ok" in data else None
    try:
        entries = sub_agent_tokens(outcome, "trace")
    except ValueError:
        return None
    total = None
    for _, _, usage in entries:
        total = usage if total is None else total + usage
    return total


def _as_parts(messages: Any) -> Any:
    """Chat messages (``ChatMessage`` dumps) in the conventions' shape:
    ``[{"role", "parts": [{"type": "text", "content"}, ...]}]``."""
    if not isinstance(messages, list):
        return messages
    shaped = []
    for message in messages:
        if not isinstance(message, Mapping):
            shaped.append(message)
            continue
        parts: List[Dict[str, Any]] = []
        if message.get("content") not in (None, ""):
            parts.append({"type": "text", "content": message.get("content")})
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name"),
                              "arguments": function.get("arguments")})
        role = message.get("role")
        shaped.append({"role": getattr(role, "value", role), "parts": parts})
    return shaped
