"""The progress stream: what each run did, step by step, published after commit.

A follower (a UI, a log, another job) reads one record per committed fact
of a run. Records are derived from the journal entries a commit wrote, and
published when that commit has landed, all of one commit in one publish:

    commit 1  ->  run_started, step_completed (InputEvent action)
    commit 2  ->  model_reply (with the tool calls it asked for), step_completed
    commit 3  ->  tool_result x N, step_completed (the tool action)
    commit 4  ->  model_reply, step_completed, output, ..., run_finished

So a follower never sees a step that a failover could undo (an unjournaled
model reply could come out differently when asked again), sees a reply's tool
calls before their results and the results before the next model request,
and publishes per run equal commits per run. ``steering_consumed`` records
come with the commit of the step that consumed the messages.

A run that commits nothing (no journaled call: deterministic, so a re-run
after a failover does the same) publishes once, when it ends. A replayed run
first re-publishes what its journal already held, in step order, marked
``replayed: true``: after a failover the earlier publishes may or may not
have reached the follower (Flink rolls back outputs an exactly-once sink had
not committed), so a follower deduplicates by ``(key, seq, step, kind,
index)`` where it needs exactly once.

Record shape (JSON-like dict)::

    {"key", "seq", "commit", "kind", "step", ...kind fields, ["replayed": true]}

Each record of a journal entry that carries its times (``"t"``: calls,
step completions, the run's end) has ``start`` (ISO-8601 UTC with
milliseconds, as the event log's timestamps: ``"2026-01-15T10:30:00.123Z"``)
and ``duration_ms``; a replay's re-publish shows the first run's times.

Usage (``runtime.execution.usage``): a ``model_reply`` has ``usage``
(``{"input_tokens", "output_tokens"[, "cached_input_tokens"][,
"reasoning_tokens"]}``) and ``response_model`` when the reply reports
them, and ``cost_usd`` when the price table (``usage.prices``) prices that
model. ``run_finished`` and ``run_failed`` have the record's total
``usage`` over every model call journaled for it (replayed ones included,
each once; a sub-agent's calls included, from the tokens journaled with
its result) and ``cost_usd``, the cost of the calls whose model has a
price (absent when none has).

Callback URLs and ids in any field are redacted (``capability_redaction``:
``[callback <fingerprint>]``): a follower never holds a capability.

``commit`` numbers the run's commits from 1 (0 for a replay's re-publish).
Kinds: ``run_started``; ``model_reply`` (``model``, ``content``,
``tool_calls``: ``[{"id", "name", "arguments"}]``); ``tool_result`` (``tool``,
``result`` or ``error``); ``call_result`` (``function``, ``result`` or
``error``: ``durable_execute``); ``call_started`` (``function``: a
``durable_execute`` with a reconciler began; a ``call_result`` follows, or,
after a failover cut it off, the reconciler's answer as its
``call_result``); ``model_reply`` also ``usage``,
``response_model``, ``cost_usd`` (above); ``sub_agent_result`` (``agent``,
``result``); ``turn_started`` (``framework``, ``agent``, ``prompt``: an
agent framework's turn, ``integrations.frameworks``); ``steering_consumed`` (``messages``); ``attempt_failed``
(``failed_attempts``: a retry of the step began); ``step_completed``
(``events``: the event types the step sent); ``output`` (``output``);
``run_finished`` (``outcome``: ``ok`` or ``skipped``); ``run_failed``
(``error``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from flink_agents.runtime.durability.call_started import is_started
from flink_agents.runtime.durability.codec import plain_json
from flink_agents.runtime.execution.token_usage import sub_agent_tokens
from flink_agents.runtime.execution.usage import PriceTable, Usage, add_to_totals, model_call_usage, usage_of_reply
from flink_agents.runtime.features.capability_redaction import redact
from flink_agents.stores.journal import COMPLETION, FAILED_ATTEMPTS, RUN_END, RUN_STEP, JournalEntry

__all__ = ["RunProgress", "records_of"]

# Turned on by ``progress.enabled`` (``RuntimeOptions.PROGRESS_ENABLED``).
_OUTPUT_EVENT = "flink_agents.api.events.event:OutputEvent"
_STEP_INDEX = re.compile(r"@(\d+)")

Record = Dict[str, Any]


def _plain(value: Any) -> Any:
    """A journaled value as plain JSON (codec tags removed, ``runtime.durability.codec``)."""
    return plain_json(value)


def _outcome_fields(payload: str) -> Dict[str, Any]:
    data = json.loads(payload)
    if "ok" in data:
        return {"result": _plain(data["ok"])}
    return {"error": f"{data['error']['type'].rpartition(':')[2]}: {data['error']['message']}"}


def records_of(entry: JournalEntry, prices: Optional[PriceTable] = None) -> List[Record]:
    """The progress records of one journal entry (without key/seq/commit),
    with its times when journaled (``start``, ``duration_ms``).

    Args:
        prices: Gives a ``model_reply`` its ``cost_usd``; None: no cost.
    """
    records = _records_of(entry, prices)
    times = _times(entry.payload)
    if times is not None:
        for record in records:
            record.update(times)
    return records


def _times(payload: str) -> Optional[Dict[str, Any]]:
    """``{"start", "duration_ms"}`` of an entry's ``"t": [start ns,
    duration ns]`` (``durability.journal.timed``); None without it."""
    if '"t":' not in payload:
        return None
    t = json.loads(payload).get("t")
    if not (isinstance(t, list) and len(t) == 2 and all(isinstance(v, int) for v in t)):
        return None
    start_ns, duration_ns = t
    start = datetime.fromtimestamp(start_ns // 1_000_000 / 1000, timezone.utc)
    return {"start": start.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "duration_ms": round(duration_ns / 1e6, 3)}


def _usage_fields(reply: Any, prices: Optional[PriceTable]) -> Dict[str, Any]:
    """``usage``, ``response_model`` and ``cost_usd`` of a model reply (plain JSON)."""
    if not isinstance(reply, dict):
        return {}
    model, usage = usage_of_reply(reply)
    fields: Dict[str, Any] = {}
    if usage is not None:
        fields["usage"] = usage.as_dict()
    if model is not None:
        fields["response_model"] = model
    cost = prices.cost(model, usage) if prices else None
    if cost is not None:
        fields["cost_usd"] = cost
    return fields


def _records_of(entry: JournalEntry, prices: Optional[PriceTable]) -> List[Record]:
    if entry.step == RUN_STEP and entry.ordinal == RUN_END:
        return [{"kind": "run_finished", "step": None, "outcome": json.loads(entry.payload).get("outcome")}]
    if entry.ordinal == FAILED_ATTEMPTS:  # a retry of the step began (runtime.execution.action_loop)
        return [{"kind": "attempt_failed", "step": entry.step,
                 "failed_attempts": json.loads(entry.payload).get("failed")}]
    if entry.ordinal == COMPLETION:
        completion = json.loads(entry.payload)
        events = completion.get("events", [])
        records: List[Record] = [{
            "kind": "step_completed",
            "step": entry.step,
            "events": [event["type"].rpartition(":")[2] for event in events],
        }]
        for event in events:
            if event["type"] == _OUTPUT_EVENT:
                records.append({"kind": "output", "step": entry.step, "output": _plain(event["fields"].get("output"))})
        return records
    if is_started(entry):  # a call with a reconciler began; its outcome replaces this (durability.call_started)
        return [{"kind": "call_started", "step": entry.step, "function": entry.function_id}]
    kind, _, name = entry.function_id.partition(":")
    fields = _outcome_fields(entry.payload)
    if kind == "chat" and "result" in fields:
        reply = fields["result"] or {}
        calls = [
            {"id": c.get("id"), "name": (c.get("function") or {}).get("name"),
             "arguments": (c.get("function") or {}).get("arguments")}
            for c in reply.get("tool_calls") or []
        ]
        return [{"kind": "model_reply", "step": entry.step, "model": name,
                 "content": reply.get("content"), "tool_calls": calls, **_usage_fields(reply, prices)}]
    if kind == "tool":
        return [{"kind": "tool_result", "step": entry.step, "tool": name, **fields}]
    if kind == "turn" and "result" in fields:  # an agent framework's turn began (integrations.frameworks)
        framework, _, agent = name.partition("/")
        return [{"kind": "turn_started", "step": entry.step, "framework": framework, "agent": agent,
                 "prompt": (fields["result"] or {}).get("prompt")}]
    if kind == "agent":
        return [{"kind": "sub_agent_result", "step": entry.step, "agent": name, **fields}]
    if kind == "steering":
        taken = fields.get("result") or []
        if not taken:
            return []  # a take that found nothing (journaled so a replay finds nothing too)
        return [{"kind": "steering_consumed", "step": entry.step, "messages": [m for _, m in taken]}]
    return [{"kind": "call_result", "step": entry.step, "function": entry.function_id, **fields}]


def _step_order(entry: JournalEntry) -> Tuple[int, int, int]:
    """Replay order: by event index of the step, calls before the step's
    completion, the run end last."""
    if entry.step == RUN_STEP:
        return (2**62, 0, 0)
    match = _STEP_INDEX.search(entry.step)
    index = int(match.group(1)) if match else 0
    return (index, 1 if entry.ordinal == COMPLETION else 0, entry.ordinal)


class RunProgress:
    """Publishes one run's progress (see the module docstring).

    Args:
        key: The run's key (as the user's key selector gave it).
        seq: The record's sequence number.
        publish: Called once per commit with that commit's records, in order.
        prices: The engine's price table (``usage.prices``): costs in
            ``model_reply`` and the run's end; None: no costs.
        key_usage: The key's usage totals before this record
            (``KeyState.usage``): ``run_finished`` carries them with the
            record's added (``key_usage``), as the key's state will.
    """

    def __init__(self, key: Any, seq: int, publish: Callable[[List[Record]], None],
                 prices: Optional[PriceTable] = None, key_usage: Optional[Dict[str, Any]] = None) -> None:
        self._key = key
        self._seq = seq
        self._publish = publish
        self._prices = prices
        self._key_usage = key_usage or {}  # the key's totals before this record (KeyState.usage)
        self._started = False
        self.commits = 0
        self.publishes = 0
        self._totaled: set = set()  # (step, ordinal) of the entries in the totals
        self._usage: Optional[Usage] = None
        self._cost: Optional[float] = None

    def _records(self, entries: Iterable[JournalEntry]) -> List[Record]:
        """The records of ``entries``, the record's usage totals kept, and
        given to its end."""
        records: List[Record] = []
        for entry in entries:
            self._total(entry)
            records += records_of(entry, self._prices)
        for record in records:
            if record["kind"] in ("run_finished", "run_failed"):
                record.update(self._totals())
            if record["kind"] == "run_finished" and (self._usage is not None or self._cost is not None):
                record["key_usage"] = add_to_totals(self._key_usage, self._usage, self._cost)
        return records

    def _total(self, entry: JournalEntry) -> None:
        position = (entry.step, entry.ordinal)
        if position in self._totaled:
            return
        self._totaled.add(position)
        if entry.function_id.startswith("chat:"):
            self._add(*model_call_usage(entry.function_id, entry.payload))
        elif entry.function_id.startswith("agent:"):
            data = json.loads(entry.payload)
            try:
                tokens = sub_agent_tokens(plain_json(data["ok"]), entry.step) if "ok" in data else []
            except ValueError:
                return  # the metrics report it (token_usage); a follower's totals skip it
            for _, model, usage in tokens:
                self._add(model, usage)

    def _add(self, model: Optional[str], usage: Optional[Usage]) -> None:
        if usage is None:
            return
        self._usage = usage if self._usage is None else self._usage + usage
        cost = self._prices.cost(model, usage) if self._prices else None
        if cost is not None:
            self._cost = cost if self._cost is None else self._cost + cost

    def _totals(self) -> Dict[str, Any]:
        totals: Dict[str, Any] = {}
        if self._usage is not None:
            totals["usage"] = self._usage.as_dict()
        if self._cost is not None:
            totals["cost_usd"] = self._cost
        return totals

    def _send(self, commit: int, records: Iterable[Record], replayed: bool = False) -> None:
        batch = []
        for record in records:
            # A follower never gets a callback's capability (its URL or id).
            record = redact({"key": self._key, "seq": self._seq, "commit": commit, **record})
            if replayed:
                record["replayed"] = True
            batch.append(record)
        if batch:
            self._publish(batch)
            self.publishes += 1

    def _started_record(self) -> List[Record]:
        if self._started:
            return []
        self._started = True
        return [{"kind": "run_started", "step": None}]

    def replayed(self, journaled: Iterable[JournalEntry]) -> None:
        """Re-publish what a replayed run's journal already held."""
        entries = sorted(journaled, key=_step_order)
        if entries:
            self._send(0, self._started_record() + self._records(entries), replayed=True)

    def committed(self, entries: List[JournalEntry]) -> None:
        """A commit of ``entries`` landed: publish them."""
        self.commits += 1
        self._send(self.commits, self._started_record() + self._records(entries))

    def ended_without_commit(self, outcome: str, outputs: List[Any]) -> None:
        """The run ended having committed nothing: publish it once."""
        records = self._started_record()
        records += [{"kind": "output", "step": None, "output": output} for output in outputs]
        records.append({"kind": "run_finished", "step": None, "outcome": outcome})
        self._send(self.commits + 1, records)

    def failed(self, error: BaseException) -> None:
        """The run failed (after its last commit): publish that."""
        self._send(self.commits + 1, self._started_record() + [
            {"kind": "run_failed", "step": None, "error": f"{type(error).__name__}: {error}", **self._totals()}
        ])
