"""Tool descriptions in the OpenAI function-calling shape, as Flink Agents
0.3.1's ``chat_model_utils`` gives them (used by the OpenAI and Azure OpenAI
connections, and by any provider that speaks the same ``tools`` format), and
the ``<think>`` block split of reasoning models (OpenAI-compatible servers,
Ollama)."""

from __future__ import annotations

import json
import re
from typing import Any, Dict

from flink_agents.api.tools.tool import ToolMetadata

__all__ = ["MAX_TOOL_DESCRIPTION_CHARS", "parse_tool_arguments", "split_reasoning", "to_openai_tool"]

# The bound Flink Agents 0.3.1 enforces on a function's description.
MAX_TOOL_DESCRIPTION_CHARS = 1024


def to_openai_tool(*, metadata: ToolMetadata, skip_length_check: bool = False) -> Dict[str, Any]:
    """One chat-completions ``tools`` entry for a tool.

    Args:
        metadata: The tool's name, description and argument schema.
        skip_length_check: Accept a description longer than
            ``MAX_TOOL_DESCRIPTION_CHARS``.

    Returns:
        ``{"type": "function", "function": {"name", "description",
        "parameters"}}``, ``parameters`` being the argument JSON schema
        (``metadata.get_parameters_dict()``).

    Raises:
        ValueError: The description is longer than 1024 characters (the
            message names the tool), unless ``skip_length_check``.
    """
    if not skip_length_check and len(metadata.description) > MAX_TOOL_DESCRIPTION_CHARS:
        raise ValueError(
            f"tool {metadata.name!r}: description has {len(metadata.description)} characters, more than "
            f"{MAX_TOOL_DESCRIPTION_CHARS}; shorten it or move the details into the prompt"
        )
    return {
        "type": "function",
        "function": {
            "name": metadata.name,
            "description": metadata.description,
            "parameters": metadata.get_parameters_dict(),
        },
    }


_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_THINK_END = "</think>"


def split_reasoning(text: str) -> tuple[str, str]:
    """Split ``<think>...</think>`` blocks off a reply.

    A reply that closes a block it never opened (some servers drop the
    opening tag) has everything before ``</think>`` taken as reasoning.

    Returns:
        ``(answer, reasoning)``, both stripped; ``reasoning`` is ``""`` if
        there was none, blocks are joined by blank lines.
    """
    parts = [m.strip() for m in _THINK_BLOCK.findall(text)]
    answer = _THINK_BLOCK.sub("", text)
    if _THINK_END in answer:
        head, _, answer = answer.rpartition(_THINK_END)
        parts.insert(0, head.replace("<think>", "").strip())
    return answer.strip(), "\n\n".join(p for p in parts if p)


def parse_tool_arguments(tool_name: str, text: Any, provider: str) -> Dict[str, Any] | str:
    """A tool call's arguments, sent as JSON text (OpenAI-style APIs), as a dict.

    Arguments that are not a JSON object come back as the text the model
    sent: a malformed call is the model's to correct, so the built-in tool
    action answers it with an error result naming the tool and the JSON
    error (``runtime.features.tool_arguments``) instead of failing the
    reply, and the text goes back to the provider as it was sent.

    Args:
        tool_name: The called tool (kept for callers; unused).
        text: The arguments' JSON text (a dict is taken as is; None or blank: no arguments).
        provider: The provider (kept for callers; unused).

    Returns:
        The object as a dict, or ``text`` itself when it is not a JSON object.
    """
    if isinstance(text, dict):
        return text
    if text is None or not str(text).strip():
        return {}
    text = str(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value if isinstance(value, dict) else text
