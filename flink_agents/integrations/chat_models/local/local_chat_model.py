"""The built-in offline chat model "local": deterministic review analysis.

A stand-in for a provider, so that an agent (and its tool-call loop) runs
without network, keys or GPU: in tests, demos and benchmarks. It does not
read the system prompt; its answers have one fixed format.

How it replies, from the conversation's last USER message (not counting
the built-in chat action's re-asks for a structured answer, which carry
``extra_args["output_schema_reask"]``: the review is still the input):

1. The review: if the message is a JSON object with a ``"review"`` field (or
   holds one, e.g. after a prompt's instructions), the review is that field
   and the object's other fields (``"id"``, ...) are kept for tool arguments;
   otherwise the whole message is the review.
2. If the review reports shipping damage (``lexicon.has_shipping_damage``),
   a tool named ``notify_shipping_manager`` is offered, and no TOOL message
   follows the last user message yet, the reply is one call of that tool
   (provider id ``local-call-0``). Its arguments are filled by name from the
   tool's argument schema: a property named like a field of the JSON object
   gets that field; a missing string property named like review / text /
   content / comment / message gets the review text; others are left out.
3. Otherwise (also once the tool's result came back) the reply's content is
   the JSON text ``{"score": int 1..5, "reasons": [str, ...]}`` (1 to 3
   reasons; ``"reports shipping damage"`` first when detected), from
   ``lexicon.analyze``.

Structured output: the verdict is JSON matching ``{"score": integer 1..5,
"reasons": [string, ...]}``, so it validates against a schema of that shape
(such as the review job's ``ReviewAnalysis``) on the instruction path (the
connection does not set ``supports_output_schema``; it ignores the
instruction).

No randomness, no clock: the same conversation always gets the same reply.
About 20 us for a 130-character review.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Sequence, Tuple

from flink_agents.api.agents.types import REASK_MARK
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.tools.tool import Tool
from flink_agents.integrations.chat_models.local.lexicon import analyze

__all__ = [
    "LOCAL_CALL_ID",
    "SHIPPING_TOOL",
    "LocalChatModelConnection",
    "LocalChatModelSetup",
    "local_reply",
    "read_input",
    "tool_arguments",
]

SHIPPING_TOOL = "notify_shipping_manager"
LOCAL_CALL_ID = "local-call-0"
_TEXT_PARAM = re.compile(r"review|text|content|comment|message|body", re.IGNORECASE)


def _parse_object(text: str) -> Dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_input(content: str) -> Tuple[str, Dict[str, Any]]:
    """Split a user message into the review text and the other fields.

    Args:
        content: The message text: a JSON object with a ``"review"`` field, a
            text holding such an object (the outermost ``{...}``), or plain
            review text.

    Returns:
        ``(review, fields)``; ``fields`` is the JSON object (with its
        ``"review"``), or ``{}`` for plain text.
    """
    start, end = content.find("{"), content.rfind("}")
    if start < 0 or end < start:
        return content, {}
    fields = _parse_object(content)
    if fields is None or "review" not in fields:
        embedded = _parse_object(content[start:end + 1])
        if embedded is not None and "review" in embedded:
            fields = embedded
    if fields is None:
        return content, {}
    review = fields.get("review")
    if review is None:
        return content, fields
    return review if isinstance(review, str) else json.dumps(review), fields


def _accepts_string(schema: Dict[str, Any]) -> bool:
    kinds = [schema.get("type")] + [s.get("type") for s in schema.get("anyOf", []) if isinstance(s, dict)]
    return all(k is None for k in kinds) or "string" in kinds


def tool_arguments(tool: Tool, review: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """Arguments for ``tool``, filled by name (see the module docstring).

    Args:
        tool: The tool; its ``metadata.args_schema["properties"]`` are used.
        review: The review text.
        fields: The input's JSON fields.

    Returns:
        ``{property: value}`` in the schema's property order.
    """
    arguments: Dict[str, Any] = {}
    properties = tool.metadata.args_schema.get("properties") or {}
    for name, schema in properties.items():
        if name in fields:
            arguments[name] = fields[name]
        elif _TEXT_PARAM.search(name) and _accepts_string(schema if isinstance(schema, dict) else {}):
            arguments[name] = review
    return arguments


def local_reply(messages: Sequence[ChatMessage], tools: Sequence[Tool] | None = None) -> ChatMessage:
    """The local model's reply to ``messages`` (see the module docstring).

    Args:
        messages: The conversation, oldest first; with no USER message the
            review is empty (score 3).
        tools: The tools offered; only ``notify_shipping_manager`` is ever called.

    Returns:
        An assistant message: one tool call, or the JSON verdict as content.
    """
    last_user = -1
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if MessageRole(message.role) == MessageRole.USER and not (message.extra_args or {}).get(REASK_MARK):
            last_user = index
            break
    content = messages[last_user].content if last_user >= 0 else ""
    review, fields = read_input(content)
    analysis = analyze(review)
    if analysis.shipping_damage:
        tool = next((t for t in tools or () if t.metadata.name == SHIPPING_TOOL), None)
        answered = any(MessageRole(m.role) == MessageRole.TOOL for m in messages[last_user + 1:])
        if tool is not None and not answered:
            call = {
                "id": LOCAL_CALL_ID,
                "type": "function",
                "function": {"name": SHIPPING_TOOL, "arguments": tool_arguments(tool, review, fields)},
                "original_id": LOCAL_CALL_ID,
            }
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])
    verdict = {"score": analysis.score, "reasons": analysis.reasons}
    return ChatMessage(role=MessageRole.ASSISTANT, content=json.dumps(verdict))


class LocalChatModelConnection(BaseChatModelConnection):
    """Connection of the built-in "local" model: nothing to connect to.

    Thread-safe and cheap; ``achat`` computes inline (no worker thread).
    """

    def chat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """The reply (see ``local_reply``); ``kwargs`` (model settings) are ignored."""
        return local_reply(messages, tools)

    async def achat(
        self,
        messages: Sequence[ChatMessage],
        tools: List[Tool] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        """As ``chat``, without leaving the event loop."""
        return local_reply(messages, tools)


class LocalChatModelSetup(BaseChatModelSetup):
    """Setup of the built-in "local" model.

    Attributes:
        connection: Name of a ``LocalChatModelConnection`` resource.
        model: Informational only; defaults to ``"local"``.
    """

    model: str = "local"
