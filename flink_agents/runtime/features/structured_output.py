"""Structured output in the built-in chat action (``runtime.builtin_actions``).

How a schema reaches the model: natively when the setup's connection class
sets ``supports_output_schema`` (the ``output_schema`` keyword goes through
the setup to the connection), else as a system instruction, which the
setup adds, or, for a 0.3.1-style setup that overrides ``chat``/``achat``
and does not expect the keyword, which the action adds to the messages.

A final answer that does not match is answered with a user message naming
the field and the problem (marked ``REASK_MARK`` in its ``extra_args``) and
the model is asked again; a per-key conversation stores the turn without
these re-asks and the answers they rejected.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from flink_agents.api.agents.types import REASK_MARK, OutputSchema, OutputValidationError
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelSetup
from flink_agents.api.resource import ResourceType
from flink_agents.api.runner_context import RunnerContext

__all__ = ["native_schema", "overrides_chat", "reask_message", "without_reasks"]


def overrides_chat(setup: BaseChatModelSetup) -> bool:
    return type(setup).chat is not BaseChatModelSetup.chat or type(setup).achat is not BaseChatModelSetup.achat


def native_schema(setup: BaseChatModelSetup, ctx: RunnerContext) -> bool:
    """Whether the setup's connection takes ``output_schema`` natively (its
    class sets ``supports_output_schema``); False when the setup names no
    connection that exists (a setup that overrides ``chat`` may use none)."""
    try:
        connection = ctx.get_resource(setup.connection, ResourceType.CHAT_MODEL_CONNECTION)
    except KeyError:
        return False
    return bool(getattr(type(connection), "supports_output_schema", False))


def reask_message(schema: OutputSchema, mismatch: OutputValidationError) -> Dict[str, Any]:
    """The user message that asks again for an answer matching ``schema``,
    naming where the last one went wrong (marked ``REASK_MARK`` in its
    ``extra_args``, so a model that reads the last user message as its
    input, like the offline ``local`` model, can tell it apart)."""
    where = f"the field {mismatch.field!r}" if mismatch.field else "the answer as a whole"
    text = (
        f"Your answer does not match the output schema {schema.name!r}: {where}: {mismatch.problem}. "
        "Answer again with only a JSON value that matches this JSON schema, with no other text:\n"
        f"{json.dumps(schema.json_schema(), sort_keys=True)}"
    )
    return ChatMessage(role=MessageRole.USER, content=text, extra_args={REASK_MARK: True}).model_dump(mode="json")


def without_reasks(conversation: Dict[str, Any]) -> Dict[str, Any]:
    """``conversation`` without its re-asks for a structured answer and the
    answers they rejected (each re-ask follows the answer it rejects; all
    are after the turn's start, so ``TURN_START`` stays valid)."""
    messages = conversation["messages"]
    dropped = set()
    for index, message in enumerate(messages):
        if (message.get("extra_args") or {}).get(REASK_MARK):
            dropped.update((index - 1, index))
    if not dropped:
        return conversation
    return {**conversation, "messages": [m for i, m in enumerate(messages) if i not in dropped]}
