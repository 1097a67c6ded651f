"""What an MCP tool result becomes: the user-facing value and the model's text.

``extract_mcp_content_item`` turns one content block of a ``CallToolResult``
into a JSON value (Flink Agents 0.3.1's forms, extended to every block type
of the ``mcp`` SDK 2.x):

=====================================  =====================================================
block                                  value
=====================================  =====================================================
``TextContent``                        its text (a ``str``)
``ImageContent``                       ``{"type": "image", "data": <base64>, "mimeType": ...}``
``AudioContent``                       ``{"type": "audio", "data": <base64>, "mimeType": ...}``
``EmbeddedResource`` (text)            ``{"type": "resource", "uri", "mimeType", "text"}``
``EmbeddedResource`` (blob)            ``{"type": "resource", "uri", "mimeType", "blob": <base64>}``
``ResourceLink``                       ``{"type": "resource_link", "uri", "name", "mimeType", "description"}``
anything else                          its ``model_dump(mode="json")`` (a dict with its ``type``)
=====================================  =====================================================

``extract_call_tool_result`` gives a whole result as the list of its blocks'
values, followed by ``{"type": "structured", "data": {...}}`` when the
result has ``structuredContent``: what ``MCPTool.call`` returns and what a
``ToolResponseEvent`` carries.

``content_text_for_model`` is what a chat model is shown of that list (the
runtime then wraps it as untrusted data): texts as they are, images and
audio as a placeholder with mime type and size (never the base64),
embedded text resources with their URI, blobs and links as a placeholder;
the structured item only when there is no other block (the MCP
specification has servers repeat structured content as text).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Dict, List

from flink_agents.integrations.sdk import import_sdk

__all__ = ["content_text_for_model", "extract_call_tool_result", "extract_mcp_content_item"]


def _types() -> Any:
    return import_sdk("mcp.types", "mcp", "flink_agents.integrations.mcp")


def extract_mcp_content_item(content_item: Any) -> Dict[str, Any] | str:
    """One content block of an MCP result as a JSON value (forms in the module docstring).

    Args:
        content_item: A block of ``CallToolResult.content`` (``mcp.types``).

    Returns:
        A ``str`` for text, else a dict with a ``"type"`` key.

    Raises:
        ImportError: The ``mcp`` package is not installed (names the extra).
    """
    types = _types()
    if isinstance(content_item, types.TextContent):
        return content_item.text
    if isinstance(content_item, (types.ImageContent, types.AudioContent)):
        return {"type": content_item.type, "data": content_item.data, "mimeType": content_item.mime_type}
    if isinstance(content_item, types.EmbeddedResource):
        resource = content_item.resource
        value: Dict[str, Any] = {"type": "resource", "uri": str(resource.uri), "mimeType": resource.mime_type}
        if isinstance(resource, types.TextResourceContents):
            value["text"] = resource.text
        elif isinstance(resource, types.BlobResourceContents):
            value["blob"] = resource.blob
        else:
            value["contents"] = resource.model_dump(mode="json", by_alias=True, exclude_none=True)
        return value
    if isinstance(content_item, types.ResourceLink):
        return {
            "type": "resource_link",
            "uri": str(content_item.uri),
            "name": content_item.name,
            "mimeType": content_item.mime_type,
            "description": content_item.description,
        }
    if hasattr(content_item, "model_dump"):
        return content_item.model_dump(mode="json", by_alias=True, exclude_none=True)
    return str(content_item)


def extract_call_tool_result(result: Any) -> List[Any]:
    """A ``CallToolResult`` as the list of its blocks' values, plus
    ``{"type": "structured", "data": ...}`` last when it has structured content.

    Raises:
        ImportError: The ``mcp`` package is not installed.
    """
    items: List[Any] = [extract_mcp_content_item(block) for block in result.content or []]
    if result.structured_content is not None:
        items.append({"type": "structured", "data": result.structured_content})
    return items


def _decoded_size(data: Any) -> str:
    """``"<n> bytes"`` of base64 ``data`` (``"unknown size"`` if it is not base64)."""
    if not isinstance(data, str):
        return "unknown size"
    try:
        return f"{len(base64.b64decode(data, validate=True))} bytes"
    except (binascii.Error, ValueError):
        return "unknown size"


def _item_text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        return json.dumps(item)
    kind = item.get("type")
    if kind in ("image", "audio"):
        return f"[{kind}: {item.get('mimeType')}, {_decoded_size(item.get('data'))}]"
    if kind == "resource":
        if "text" in item:
            return f"[resource {item.get('uri')} ({item.get('mimeType')})]\n{item['text']}"
        if "blob" in item:
            return f"[resource {item.get('uri')}: {item.get('mimeType')}, {_decoded_size(item.get('blob'))}]"
    if kind == "resource_link":
        described = f": {item['description']}" if item.get("description") else ""
        return f"[resource link {item.get('uri')} ({item.get('name')}, {item.get('mimeType')}){described}]"
    if kind == "structured":
        return json.dumps(item.get("data"), sort_keys=True)
    return json.dumps(item, sort_keys=True)


def content_text_for_model(items: Any) -> str:
    """The text a chat model is shown of an MCP tool's value (not yet
    wrapped as untrusted; see the module docstring).

    Args:
        items: What ``extract_call_tool_result`` returned (a list), or any
            JSON value (shown as JSON, a string as itself).
    """
    if not isinstance(items, list):
        return items if isinstance(items, str) else json.dumps(items, sort_keys=True)
    shown = [i for i in items if not (isinstance(i, dict) and i.get("type") == "structured")]
    if not shown:
        shown = items
    return "\n".join(_item_text(item) for item in shown)
