"""Per-key conversations of the built-in chat action (``conversation="per_key"``).

A chat model setup with ``conversation="per_key"`` keeps a key's conversation
across records: each ``ChatRequestEvent`` is a *turn*, the model sees the
earlier turns before the request's messages, and when the turn ends (the
``ChatResponseEvent`` is sent) its messages are appended and the whole is
compacted. See ``docs/conversations.md``.

Where it lives: short-term memory, under ``_flink_agents.conversations.<setup>``
(``conversation_path``), as ``{"v": 1, "turns": [[message, ...], ...]}``, each
message a ``ChatMessage.model_dump(mode="json")``. So it is keyed state,
checkpointed with the key, subject to the short-term memory TTL, and written
by the step that ends the turn (its memory writes are journaled with the
step's completion, so a replay re-applies them instead of asking again). The
reserved prefix keeps it out of ``get_field_names``.

What a turn holds: the request's messages (after its leading system
messages), every assistant message (tool calls included), every tool result,
the outcome messages of asynchronous operations, the steering messages
taken during the turn, and the final answer. Not stored: the prompt's filled
messages and the request's leading system messages: they are instructions
given again with every turn.

Compaction (``compact``): drop whole oldest turns until the kept turns fit
both bounds; the newest turn is never dropped, and a turn that alone exceeds
a bound is kept whole. A tool call is therefore never separated from its
result, and the history never starts with an orphaned tool result.

Token estimate (``estimate_tokens``): ``ceil(chars / 4)`` of a message's text
(content, tool names and arguments as JSON) plus 4 tokens of per-message
overhead. OpenAI documents about 4 characters per token as a rule of thumb for
English text; it is an estimate, not a tokenizer count (code, JSON and other
languages use more tokens per character), so leave headroom below the model's
context window.

Everything here except ``begin_turn``/``end_turn`` (the chat action's glue over
memory) is a pure function of its arguments.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence

from flink_agents.api.memory_object import MemoryObject

__all__ = [
    "CONVERSATIONS_PATH",
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "begin_turn",
    "compact",
    "conversation_path",
    "dump_turns",
    "end_turn",
    "estimate_tokens",
    "flatten",
    "load_turns",
    "pairing_problems",
    "turn_tokens",
    "validate_bounds",
]

Message = Dict[str, Any]
Turn = List[Message]

CONVERSATIONS_PATH = "_flink_agents.conversations"
FORMAT_VERSION = 1
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
# Key of the chat action's per-request state: where the current turn starts
# in its ``messages``. Present only for a setup with ``conversation="per_key"``.
TURN_START = "turn_start"


def conversation_path(setup_name: str) -> str:
    """Memory path of a setup's conversation.

    A dot in the name would nest the path under another setup's, so ``%`` and
    ``.`` are escaped (``%25``, ``%2E``).
    """
    if not setup_name:
        raise ValueError("a chat model setup needs a name to keep a conversation")
    escaped = setup_name.replace("%", "%25").replace(".", "%2E")
    return f"{CONVERSATIONS_PATH}.{escaped}"


def validate_bounds(max_messages: int, max_tokens: Optional[int]) -> None:
    """Check the bounds of a conversation.

    Raises:
        ValueError: ``max_messages`` below 2 (the smallest turn is a user
            message and its answer) or ``max_tokens`` below 1.
    """
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 2:
        raise ValueError(
            f"conversation_max_messages must be an integer of at least 2 "
            f"(a user message and its answer), got {max_messages!r}"
        )
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ValueError(
            f"conversation_max_tokens must be None (no token bound) or an integer of at least 1, "
            f"got {max_tokens!r}"
        )


def _message_chars(message: Message) -> int:
    chars = len(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments or {}, separators=(",", ":"), sort_keys=True)
        chars += len(function.get("name") or "") + len(arguments)
    return chars


def estimate_tokens(message: Message) -> int:
    """Estimated tokens of one message: ``ceil(chars / 4) + 4``.

    ``chars`` counts the content and, for each tool call, the tool's name and
    its arguments as compact JSON. An estimate (OpenAI's rule of thumb of about
    4 characters per English token, plus a per-message overhead for role and
    framing), not a tokenizer count.
    """
    return math.ceil(_message_chars(message) / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS


def turn_tokens(turn: Sequence[Message], tokens_of: Callable[[Message], int] = estimate_tokens) -> int:
    """Estimated tokens of a turn (the sum over its messages)."""
    return sum(tokens_of(m) for m in turn)


def compact(
    turns: Sequence[Turn], max_messages: int, max_tokens: Optional[int] = None,
    tokens_of: Callable[[Message], int] = estimate_tokens,
) -> List[Turn]:
    """The turns to keep: the longest run of newest turns within both bounds.

    Whole oldest turns are dropped until the kept turns hold at most
    ``max_messages`` messages and (if ``max_tokens`` is set) at most
    ``max_tokens`` estimated tokens. The newest turn (the one that just
    ended) is always kept, whole, even if it alone exceeds a bound: cutting
    into a turn could separate a tool call from its result.

    Args:
        turns: The conversation's turns, oldest first.
        max_messages: Message bound, at least 2.
        max_tokens: Token bound (see ``estimate_tokens``), at least 1, or None.
        tokens_of: A message's estimated tokens (agent frameworks' messages
            have their own shapes: ``integrations.frameworks.conversation``).

    Returns:
        A new list of the kept turns (the same turn lists), oldest first.

    Raises:
        ValueError: A bound is out of range.
    """
    validate_bounds(max_messages, max_tokens)
    kept = list(turns)
    messages = sum(len(t) for t in kept)
    tokens = sum(turn_tokens(t, tokens_of) for t in kept) if max_tokens is not None else 0
    while len(kept) > 1 and (messages > max_messages or (max_tokens is not None and tokens > max_tokens)):
        dropped = kept.pop(0)
        messages -= len(dropped)
        if max_tokens is not None:
            tokens -= turn_tokens(dropped, tokens_of)
    return kept


def flatten(turns: Sequence[Turn]) -> List[Message]:
    """The turns' messages, oldest first."""
    return [m for turn in turns for m in turn]


def load_turns(value: Any) -> List[Turn]:
    """The turns of a stored conversation (``None``: no conversation yet).

    Raises:
        ValueError: The value is not a conversation of a known format version.
    """
    if value is None:
        return []
    if not isinstance(value, dict) or value.get("v") != FORMAT_VERSION or not isinstance(value.get("turns"), list):
        raise ValueError(
            f"stored conversation is not in format version {FORMAT_VERSION}: "
            f"{str(value)[:120]!r}"
        )
    return value["turns"]


def dump_turns(turns: Sequence[Turn]) -> Dict[str, Any]:
    """The stored form of ``turns``."""
    return {"v": FORMAT_VERSION, "turns": [list(t) for t in turns]}


def pairing_problems(messages: Sequence[Message]) -> List[str]:
    """What a strict provider would reject in ``messages``: empty if every
    assistant tool call is answered by exactly one later tool message, every
    tool message answers exactly one earlier call, and call ids are unique."""
    problems: List[str] = []
    call_ids = Counter()
    answered = Counter()
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                call_ids[call.get("id")] += 1
                if call_ids[call.get("id")] > 1:
                    problems.append(f"message {index}: tool call id {call.get('id')!r} is used again")
        elif role == "tool":
            call_id = (message.get("extra_args") or {}).get("tool_call_id")
            if call_id not in call_ids:
                problems.append(f"message {index}: tool result for {call_id!r} answers no earlier call")
            answered[call_id] += 1
            if answered[call_id] > 1:
                problems.append(f"message {index}: call {call_id!r} gets a second result")
    for call_id in call_ids:
        if not answered[call_id]:
            problems.append(f"tool call {call_id!r} has no result")
    return problems


def begin_turn(conversation: Dict[str, Any], memory: MemoryObject) -> None:
    """Put the key's stored history into a new request's ``messages``.

    The request's leading system messages go first (they are this turn's
    instructions), then the history, then the rest of the request; the index
    where the turn starts is kept under ``turn_start``.
    """
    history = flatten(load_turns(memory.get(conversation_path(conversation["model"]))))
    request = conversation["messages"]
    lead = 0
    while lead < len(request) and request[lead].get("role") == "system":
        lead += 1
    conversation["messages"] = request[:lead] + history + request[lead:]
    conversation[TURN_START] = lead + len(history)


def end_turn(
    conversation: Dict[str, Any],
    answer: Message,
    memory: MemoryObject,
    max_messages: int,
    max_tokens: Optional[int],
) -> None:
    """Append the ended turn to the key's stored conversation and compact it.

    The stored conversation is read again here, not taken from the turn's
    start: another turn of the same setup that ended in between (two requests
    in one run) is kept too.
    """
    path = conversation_path(conversation["model"])
    turn = conversation["messages"][conversation[TURN_START]:] + [answer]
    turns = load_turns(memory.get(path)) + [turn]
    memory.set(path, dump_turns(compact(turns, max_messages, max_tokens)))
