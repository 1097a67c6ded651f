"""Per-key state: everything a key needs to resume after a restore.

One ``KeyState`` per key lives in one Flink ``ValueState`` (as JSON, with a
schema version) or, on the local runner, in a dict. The schema is versioned:
``from_json`` refuses a version it does not know instead of misreading it.

Values go through the typed codec (``runtime.durability.codec``). Version 2 (this
release) writes queued input records and steering messages encoded by it,
and short-term memory as the flat map ``runtime.execution.memory`` keeps (values
already encoded). Version 1 (earlier releases) wrote records in an untyped
form (enums as their values, UUIDs as text) and memory values raw; it is
still read: records as they were written then, memory values re-encoded.

Both runners admit each input record through the codec when it is queued
(``admit``): the run sees what a restore would read back, and a record the
codec refuses fails at once with an ``InputRecordError`` naming key, record
and field path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Set

from flink_agents.runtime.durability.codec import DecodeError, EncodeError, decode, encode, json_text, round_trip
from flink_agents.runtime.durability.json_encoders import compact_json
from flink_agents.runtime.errors import InputRecordError, StateSchemaError
from flink_agents.runtime.execution.memory import OBJECT
from flink_agents.runtime.durability.values import decode_value as decode_v1

__all__ = ["KeyState", "PendingRecord", "STATE_SCHEMA_VERSION", "admit"]

STATE_SCHEMA_VERSION = 2
_READABLE_VERSIONS = (1, STATE_SCHEMA_VERSION)


def admit(key: Any, seq: int, value: Any, what: str = "input record") -> Any:
    """``value`` as keyed state gives it back (``decode(encode(value))``).

    Raises:
        InputRecordError: The codec cannot carry a part of ``value``; names
            ``key``, ``seq`` and the part's path (``record.items[2]``).
    """
    try:
        return round_trip(value, "record")
    except EncodeError as refused:
        raise InputRecordError(what, key, seq, refused.path, refused.reason) from None


@dataclass
class PendingRecord:
    """An input record waiting for (or in) its run.

    Attributes:
        seq: Per-key sequence number, from 0.
        value: The record.
        timestamp_ms: The record's Flink timestamp (event time), if any.
        replays: A retry of a record that ended on the error stream: the
            seq whose run (journal, callbacks, trace) this one continues,
            replaying its committed calls (``runtime.features.run_control``).
    """

    seq: int
    value: Any
    timestamp_ms: int | None = None
    replays: int | None = None
    # Not state: this record's entry in the key state's JSON (``to_json``),
    # made once. The fields above never change once the record is queued,
    # and a run that changes its input value in place does not change what
    # a restore reads back.
    entry_json: str | None = field(default=None, compare=False, repr=False)

    def state_entry(self) -> str:
        """This record's entry in the key state's JSON, encoded on first use.

        Raises:
            TypeError: The value is one the codec cannot carry (not admitted
                through ``admit``).
        """
        text = self.entry_json
        if text is None:
            entry = {"seq": self.seq, "value": encode(self.value, f"record #{self.seq}"), "ts": self.timestamp_ms}
            if self.replays is not None:
                entry["replays"] = self.replays
            text = self.entry_json = compact_json(entry)
        return text




def _read(read: Any, data: Any, what: str) -> Any:
    try:
        return read(data)
    except DecodeError as unreadable:
        raise unreadable.at(f"keyed state, {what}") from None


@dataclass
class KeyState:
    """State of one key.

    Attributes:
        journal_id: The key's journal namespace: the id of the job that first
            saw the key. It travels with the state, so a new job restored from
            a checkpoint finds the journal entries of the old one.
        next_seq: Sequence number the next input record of the key gets.
        pending: Records not yet finished, oldest first; the head is running.
        short_term_memory: The key's short-term memory (flat dotted-path map).
        runs_finished: Records of the key that finished.
        callback_deadlines: Deadlines of the callbacks of pending records,
            ``[callback id, deadline (Unix ms), record seq]``, each also a
            processing-time timer of the key (Flink driver only).
        steering: Steering messages not yet taken by a finished record,
            ``[steering seq, message]`` (``runtime.features.steering``).
        next_steering_seq: Sequence number the next steering message gets.
        usage: The key's model usage and cost over its finished records
            (``usage.add_to_totals``: records, tokens, ``cost_usd``); empty
            until a record reported some.
        budget: The key's budget window (``runtime.features.budgets``):
            ``{"v": 1, "start_ms", "tokens", "cost_usd"}``, kept only while a
            key budget (``budget.key.*``) is set; empty otherwise. Read
            back tolerantly: absent (state of earlier releases) or malformed,
            the key starts a new window.
        failed: Records that ended on the error stream, kept for a retry
            while run control is on: ``[seq, record, failed at (Unix ms)]``,
            the newest ``run_control.keep_failed`` for ``run_control.keep_failed_s``.
    """

    journal_id: str = ""
    next_seq: int = 0
    pending: List[PendingRecord] = field(default_factory=list)
    short_term_memory: Dict[str, Any] = field(default_factory=dict)
    runs_finished: int = 0
    callback_deadlines: List[List[Any]] = field(default_factory=list)
    steering: List[List[Any]] = field(default_factory=list)
    next_steering_seq: int = 0
    usage: Dict[str, Any] = field(default_factory=dict)
    failed: List[List[Any]] = field(default_factory=list)
    budget: Dict[str, Any] = field(default_factory=dict)
    # Not state: the runner's copy collects the memory paths a run reads
    # here when a TTL renewed on reads is set (runtime.execution.memory_entries).
    memory_reads: Set[str] | None = field(default=None, compare=False, repr=False)

    def to_json(self, include_memory: bool = True) -> str:
        """The state as JSON; ``include_memory=False`` leaves short-term memory
        out (a driver that keeps it in its own state, see ``memory_json``).

        Raises:
            TypeError: A queued record or steering message the codec cannot
                carry (not admitted through ``admit``).
        """
        # The queued records' entries are encoded once each (``state_entry``)
        # and spliced in: this state is written at every record's arrival
        # and end, and a key's queue can hold hundreds of records.
        head = compact_json({"v": STATE_SCHEMA_VERSION, "journal_id": self.journal_id, "next_seq": self.next_seq})
        rest = compact_json(
            {
                "stm": self.short_term_memory if include_memory else None,
                "runs_finished": self.runs_finished,
                # Written only when set: most keys have neither, and this
                # state is written for every record.
                **({"callbacks": self.callback_deadlines} if self.callback_deadlines else {}),
                **({"steering": [[seq, encode(m, f"steering message #{seq}")] for seq, m in self.steering]} if self.steering else {}),
                **({"next_steering_seq": self.next_steering_seq} if self.next_steering_seq else {}),
                **({"usage": self.usage} if self.usage else {}),
                **({"budget": self.budget} if self.budget else {}),
                **({"failed": [[seq, encode(v, f"failed record #{seq}"), at] for seq, v, at in self.failed]}
                   if self.failed else {}),
            },
        )
        return f'{head[:-1]},"pending":[{",".join([p.state_entry() for p in self.pending])}],{rest[1:]}'

    def copy(self) -> "KeyState":
        """A copy whose containers are its own (the queued records, which
        do not change, are shared); short-term memory and memory reads are
        left out (empty): a driver keeps memory apart."""
        return KeyState(
            journal_id=self.journal_id, next_seq=self.next_seq, pending=list(self.pending),
            runs_finished=self.runs_finished, callback_deadlines=[list(d) for d in self.callback_deadlines],
            steering=[list(m) for m in self.steering], next_steering_seq=self.next_steering_seq,
            usage=dict(self.usage), failed=[list(f) for f in self.failed], budget=dict(self.budget),
        )

    def memory_json(self) -> str:
        """Short-term memory alone, as JSON (read back by ``from_json``)."""
        # Values as the codec encoded them (memory.set): JSON values only.
        return json_text(self.short_term_memory, ensure_ascii=False)

    @staticmethod
    def from_json(text: str, memory_json: str | None = None) -> "KeyState":
        """Read state written by ``to_json`` (schema version 1 or 2).

        Args:
            text: What ``to_json`` wrote.
            memory_json: What ``memory_json`` wrote, for state written with
                ``include_memory=False``; None: memory from ``text`` (or empty).

        Raises:
            StateSchemaError: Unknown schema version.
            DecodeError: A queued record or steering message that cannot be
                read back (a class it may not name, a value its class as it
                is now cannot take); the message says which.
        """
        data = json.loads(text)
        version = data.get("v")
        if version not in _READABLE_VERSIONS:
            raise StateSchemaError(
                f"keyed state schema version {version!r} is not supported "
                f"(this release reads {', '.join(map(str, _READABLE_VERSIONS))})"
            )
        read = decode if version == STATE_SCHEMA_VERSION else decode_v1
        memory = json.loads(memory_json) if memory_json is not None else data["stm"]
        memory = memory or {}
        if version == 1:  # raw values then: encode them as memory keeps them now
            memory = {path: v if v == OBJECT else encode(v, path) for path, v in memory.items()}
        return KeyState(
            journal_id=data["journal_id"],
            next_seq=data["next_seq"],
            pending=[PendingRecord(p["seq"], _read(read, p["value"], f"queued record #{p['seq']}"), p.get("ts"),
                                   _seq_or_none(p.get("replays")),
                                   # As read (version 2): written again as it was, not encoded anew.
                                   compact_json(p) if version == STATE_SCHEMA_VERSION else None)
                     for p in data["pending"]],
            short_term_memory=memory,
            runs_finished=data["runs_finished"],
            callback_deadlines=data.get("callbacks") or [],  # absent before callbacks existed
            steering=[[seq, _read(read, message, f"steering message #{seq}")]
                      for seq, message in data.get("steering") or []],
            next_steering_seq=data.get("next_steering_seq", 0),
            usage=data.get("usage") if isinstance(data.get("usage"), dict) else {},  # absent before usage totals
            budget=data.get("budget") if isinstance(data.get("budget"), dict) else {},  # absent before budgets
            failed=[[int(seq), _read(read, value, f"failed record #{seq}"), int(at)]
                    for seq, value, at in data.get("failed") or []],
        )


def _seq_or_none(value: Any) -> int | None:
    """A record seq read back from state (an int >= 0), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
