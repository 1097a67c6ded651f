"""A key's conversation with a framework agent, kept across records.

The framework's own messages (its JSON: Pydantic AI ``ModelMessage``s, the
Agents SDK's input items, LangChain message dicts, ADK events) are stored
per turn in the key's short-term memory, under
``_flink_agents.conversations.<framework>:<name>`` (keyed state,
checkpointed with the key, written by the step that ends the turn and so
journaled with its completion), and compacted as native conversations are
(``runtime.durable.compact``): whole oldest turns are dropped
until at most ``max_messages`` messages (and ``max_tokens`` estimated
tokens) are kept; the newest turn is kept whole, so a tool call never loses
its result.

Token estimate: ``ceil(len(compact JSON of the message) / 4) + 4``, OpenAI's
rule of thumb of about 4 characters per token over the message's JSON
(field names included, so it overestimates the text a model sees).
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional, Sequence

from flink_agents.api.memory_object import MemoryObject
from flink_agents.runtime.durable import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    compact,
    conversation_path,
    dump_turns,
    flatten,
    load_turns,
    validate_bounds,
)

__all__ = ["FrameworkConversation", "json_tokens"]


def json_tokens(message: Dict[str, Any]) -> int:
    """Estimated tokens of a framework message (see the module docstring)."""
    text = json.dumps(message, separators=(",", ":"), sort_keys=True, default=str)
    return math.ceil(len(text) / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS


class FrameworkConversation:
    """Where and how long a key's framework conversation is kept.

    Args:
        framework: The framework's name (``pydantic_ai``).
        name: The conversation's name (usually the agent's).
        max_messages: Message bound, at least 2 (default 40, as native).
        max_tokens: Estimated-token bound, or None.

    Raises:
        ValueError: A bound is out of range, or ``name`` is empty.
    """

    def __init__(self, framework: str, name: str, max_messages: int = 40, max_tokens: Optional[int] = None) -> None:
        validate_bounds(max_messages, max_tokens)
        if not name:
            raise ValueError("a framework conversation needs a name")
        self.path = conversation_path(f"{framework}:{name}")
        self.max_messages = max_messages
        self.max_tokens = max_tokens

    def history(self, memory: MemoryObject) -> List[Dict[str, Any]]:
        """The stored messages, oldest first (``[]`` for a new key).

        Raises:
            ValueError: What is stored is not a conversation.
        """
        return flatten(load_turns(memory.get(self.path)))

    def turns(self, memory: MemoryObject) -> List[List[Dict[str, Any]]]:
        """The stored turns, oldest first."""
        return load_turns(memory.get(self.path))

    def append_turn(self, memory: MemoryObject, messages: Sequence[Dict[str, Any]]) -> None:
        """Append one turn's new messages and compact (see the module docstring)."""
        turns = load_turns(memory.get(self.path)) + [list(messages)]
        memory.set(self.path, dump_turns(compact(turns, self.max_messages, self.max_tokens, json_tokens)))
