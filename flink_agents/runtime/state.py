"""Per-key state: everything a key needs to resume after a restore.

One ``KeyState`` per key lives in one Flink ``ValueState`` (as JSON, with a
schema version) or, on the local runner, in a dict. The schema is versioned:
``from_json`` refuses a version it does not know instead of misreading it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List

from flink_agents.runtime.errors import StateSchemaError
from flink_agents.runtime.values import decode_value, encode_value

__all__ = ["KeyState", "PendingRecord", "STATE_SCHEMA_VERSION"]

STATE_SCHEMA_VERSION = 1


@dataclass
class PendingRecord:
    """An input record waiting for (or in) its run.

    Attributes:
        seq: Per-key sequence number, from 0.
        value: The record.
        timestamp_ms: The record's Flink timestamp (event time), if any.
    """

    seq: int
    value: Any
    timestamp_ms: int | None = None


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
            ``[steering seq, message]`` (``runtime.steering``).
        next_steering_seq: Sequence number the next steering message gets.
    """

    journal_id: str = ""
    next_seq: int = 0
    pending: List[PendingRecord] = field(default_factory=list)
    short_term_memory: Dict[str, Any] = field(default_factory=dict)
    runs_finished: int = 0
    callback_deadlines: List[List[Any]] = field(default_factory=list)
    steering: List[List[Any]] = field(default_factory=list)
    next_steering_seq: int = 0

    def to_json(self, include_memory: bool = True) -> str:
        """The state as JSON; ``include_memory=False`` leaves short-term memory
        out (a driver that keeps it in its own state)."""
        return json.dumps(
            {
                "v": STATE_SCHEMA_VERSION,
                "journal_id": self.journal_id,
                "next_seq": self.next_seq,
                "pending": [
                    {"seq": p.seq, "value": encode_value(p.value), "ts": p.timestamp_ms} for p in self.pending
                ],
                "stm": self.short_term_memory if include_memory else None,
                "runs_finished": self.runs_finished,
                # Written only when set: most keys have neither, and this
                # state is written for every record.
                **({"callbacks": self.callback_deadlines} if self.callback_deadlines else {}),
                **({"steering": [[seq, encode_value(m)] for seq, m in self.steering]} if self.steering else {}),
                **({"next_steering_seq": self.next_steering_seq} if self.next_steering_seq else {}),
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str) -> "KeyState":
        """Read state written by ``to_json``.

        Raises:
            StateSchemaError: Unknown schema version.
        """
        data = json.loads(text)
        if data.get("v") != STATE_SCHEMA_VERSION:
            raise StateSchemaError(
                f"keyed state schema version {data.get('v')!r} is not supported "
                f"(this release reads {STATE_SCHEMA_VERSION})"
            )
        return KeyState(
            journal_id=data["journal_id"],
            next_seq=data["next_seq"],
            pending=[PendingRecord(p["seq"], decode_value(p["value"]), p.get("ts")) for p in data["pending"]],
            short_term_memory=data["stm"] or {},
            runs_finished=data["runs_finished"],
            callback_deadlines=data.get("callbacks") or [],  # absent before callbacks existed
            steering=[[seq, decode_value(message)] for seq, message in data.get("steering") or []],
            next_steering_seq=data.get("next_steering_seq", 0),
        )
