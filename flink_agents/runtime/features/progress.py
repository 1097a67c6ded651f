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

Callback URLs and ids in any field are redacted (``capability_redaction``:
``[callback <fingerprint>]``): a follower never holds a capability.

``commit`` numbers the run's commits from 1 (0 for a replay's re-publish).
Kinds: ``run_started``; ``model_reply`` (``model``, ``content``,
``tool_calls``: ``[{"id", "name", "arguments"}]``); ``tool_result`` (``tool``,
``result`` or ``error``); ``call_result`` (``function``, ``result`` or
``error``: ``durable_execute``); ``sub_agent_result`` (``agent``,
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
from typing import Any, Callable, Dict, Iterable, List, Tuple

from flink_agents.runtime.durability.codec import plain_json
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


def records_of(entry: JournalEntry) -> List[Record]:
    """The progress records of one journal entry (without key/seq/commit)."""
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
                 "content": reply.get("content"), "tool_calls": calls}]
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
    """

    def __init__(self, key: Any, seq: int, publish: Callable[[List[Record]], None]) -> None:
        self._key = key
        self._seq = seq
        self._publish = publish
        self._started = False
        self.commits = 0
        self.publishes = 0

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
            self._send(0, self._started_record() + [r for e in entries for r in records_of(e)], replayed=True)

    def committed(self, entries: List[JournalEntry]) -> None:
        """A commit of ``entries`` landed: publish them."""
        self.commits += 1
        self._send(self.commits, self._started_record() + [r for e in entries for r in records_of(e)])

    def ended_without_commit(self, outcome: str, outputs: List[Any]) -> None:
        """The run ended having committed nothing: publish it once."""
        records = self._started_record()
        records += [{"kind": "output", "step": None, "output": output} for output in outputs]
        records.append({"kind": "run_finished", "step": None, "outcome": outcome})
        self._send(self.commits + 1, records)

    def failed(self, error: BaseException) -> None:
        """The run failed (after its last commit): publish that."""
        self._send(self.commits + 1, self._started_record() + [
            {"kind": "run_failed", "step": None, "error": f"{type(error).__name__}: {error}"}
        ])
