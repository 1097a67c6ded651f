"""Every id the runtime derives, in one place.

A run is identified by ``RunIdentity`` (journal id, key, record sequence);
everything a run creates is identified by the run, the step (action
invocation, with the branch path of the task that made it:
``runtime.durability.call_position``) and an ordinal within that task. Never by
randomness or time: a replay re-derives the same ids and so finds what the
first run journaled. The one exception is a callback's public id, which
must be unguessable (``runtime.features.callbacks``): it is drawn once and kept in
the store under the callback's ``CallbackRef``, which is derived here.

The UUID namespaces are fixed forever: ids derived with them are journaled
(event ids inside step completions, sub-agent call ids in journal ids and
call digests), so changing one would make every run in flight at an
upgrade replay differently. Two exist for that history; new kinds of ids
take the event namespace with a kind prefix.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from flink_agents.runtime.durability.derived_uuid import DerivedUUID
from flink_agents.runtime.durability.json_encoders import canonical_json
from flink_agents.runtime.durability.values import encode_value
from flink_agents.stores.callbacks import CallbackRef

__all__ = [
    "RunIdentity", "SESSIONS_PATH", "callback_ref", "event_id", "key_text", "session_path", "sub_agent_call_id",
    "sub_agent_journal_id", "tool_call_id", "framework_turn_id", "framework_tool_call_id",
]

_EVENT_NAMESPACE = uuid.UUID("3f0b3f5e-6d1c-4d8e-9a57-6c1f4a7b9e21")
_SUB_AGENT_NAMESPACE = uuid.UUID("9b4d3c1e-52f7-4c6a-8e0d-2a1f7b6c5d43")
SESSIONS_PATH = "_flink_agents.sessions"  # explicit sub-agent sessions, in the parent's memory


def key_text(key: Any) -> str:
    """A key as stable text: canonical JSON where it has a JSON form
    (``runtime.durability.values.encode_value``), else ``repr``. Journal entries,
    callback refs and ids carry the key in this form."""
    try:
        return canonical_json(encode_value(key))
    except TypeError:
        return repr(key)


class RunIdentity:
    """Who is running: journal id, key (as given and as text) and record seq.

    Attributes:
        journal_id: The key's journal namespace (``KeyState.journal_id``), or
            a sub-agent call's (``sub_agent_journal_id``).
        key: The key as the user's key selector gave it.
        seq: The record's sequence number within the key.
        key_text: ``key_text(key)``.
    """

    __slots__ = ("journal_id", "key", "seq", "key_text", "_event_prefix")

    def __init__(self, journal_id: str, key: Any, seq: int, key_as_text: str | None = None) -> None:
        self.journal_id = journal_id
        self.key = key
        self.seq = seq
        self.key_text = key_text(key) if key_as_text is None else key_as_text
        self._event_prefix: Any = None  # SHA-1 of the namespace and this run's part of the name, made once

    def event_id(self, step: str, ordinal: int) -> uuid.UUID:
        """See ``event_id``; the same value, hashed when first read
        (``DerivedUUID``), the run's part of the name once per run."""
        return DerivedUUID(self, step, ordinal)

    def event_prefix(self) -> Any:
        """The SHA-1 state of the event namespace and this run's part of an
        event id's name (``event_id``), made once; callers copy it."""
        prefix = self._event_prefix
        if prefix is None:
            prefix = self._event_prefix = hashlib.sha1(
                _EVENT_NAMESPACE.bytes + f"{self.journal_id}/{self.key_text}/{self.seq}/".encode())
        return prefix

    def __repr__(self) -> str:
        return f"RunIdentity({self.journal_id!r}, {self.key_text}, #{self.seq})"


def event_id(run: RunIdentity, step: str, ordinal: int) -> uuid.UUID:
    """The id of the ``ordinal``-th event ``step`` sent (UUIDv5, RFC 9562
    section 5.5: ``uuid5(_EVENT_NAMESPACE, "journal/key/seq/step/ordinal")``)."""
    return uuid.uuid5(_EVENT_NAMESPACE, f"{run.journal_id}/{run.key_text}/{run.seq}/{step}/{ordinal}")


def sub_agent_call_id(run: RunIdentity, step: str, name: str, ordinal: int) -> str:
    """The id of a sub-agent call: the ``ordinal``-th submit to the AGENT
    resource ``name`` by the task at ``step`` (UUIDv5, as text)."""
    return str(uuid.uuid5(_SUB_AGENT_NAMESPACE, f"{run.journal_id}/{run.key_text}/{run.seq}/{step}/{name}/{ordinal}"))


def sub_agent_journal_id(parent: RunIdentity, call_id: str) -> str:
    """The journal namespace of a sub-agent call's own calls (pruned with
    its parent's run: ``stores``)."""
    return f"{parent.journal_id}/{call_id}"


def session_path(session_id: str) -> str:
    """Where an explicit sub-agent session's memory lives in the parent's
    short-term memory."""
    return f"{SESSIONS_PATH}.{hashlib.sha256(session_id.encode('utf-8')).hexdigest()[:32]}"


def callback_ref(run: RunIdentity, step: str, ordinal: int) -> CallbackRef:
    """The call that creates a callback: the ``ordinal``-th callback of the
    task at ``step``."""
    return CallbackRef(run.journal_id, run.key_text, run.seq, step, ordinal)


def tool_call_id(request_id: str, round_index: int, index: int) -> str:
    """The runtime's id of the ``index``-th tool call the model asked for in
    round ``round_index`` of chat request ``request_id`` (an event id).

    Providers reuse their own ids across turns (``call_0`` in every turn),
    so results are keyed by this id; the provider's is kept beside it.
    """
    return f"{request_id.replace('-', '')[:12]}-{round_index}-{index}"


def framework_turn_id(run: RunIdentity, anchor: str) -> uuid.UUID:
    """The id of the agent-framework turn anchored at ``anchor``
    (``ActionContext.anchor``; UUIDv5): the framework's run id."""
    return event_id(run, f"framework_turn:{anchor}", 0)


def framework_tool_call_id(turn_id: uuid.UUID, request_index: int, index: int) -> str:
    """The id of the ``index``-th tool call in model request
    ``request_index`` of a framework turn: ``"fa<12 hex>-<request>-<index>"``.
    Unique within the turn and across turns of a key (providers reuse
    ``call_0``; frameworks pair results with calls by id)."""
    return f"fa{turn_id.hex[:12]}-{request_index}-{index}"


def vector_store_document_id(run: RunIdentity, store: str, step: str, ordinal: int, index: int) -> str:
    """The id of the ``index``-th id-less document of the ``ordinal``-th
    ``add`` to vector store ``store`` by the task at ``step`` (UUIDv5, as
    text): an ``add`` re-executed after a failover, before its journal entry
    was committed, writes the same ids (an upsert, not copies)."""
    return str(event_id(run, f"vector_store:{store}/{step}/{index}", ordinal))


def memory_item_id(run: RunIdentity, step: str, ordinal: int, index: int, text: str) -> str:
    """The id of item ``index`` (text ``text``) of the ``ordinal``-th
    long-term memory ``add`` of the task at ``step`` (UUIDv5, as text). The
    text is part of it, so a job started afresh under the same job
    identifier (record sequences from 0 again) does not overwrite older
    items that have other text."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
    return str(event_id(run, f"ltm:{step}#{ordinal}:{digest}", index))

