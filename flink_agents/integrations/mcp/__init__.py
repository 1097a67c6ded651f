"""MCP (Model Context Protocol) servers, tools and prompts (Flink Agents 0.3.1's paths)."""

from flink_agents.integrations.mcp.mcp import (
    MCPPrompt,
    MCPServer,
    MCPServerUnavailable,
    MCPSessionError,
    MCPTimeout,
    MCPTool,
    MCPToolError,
)
from flink_agents.integrations.mcp.utils import extract_mcp_content_item

__all__ = [
    "MCPPrompt",
    "MCPServer",
    "MCPServerUnavailable",
    "MCPSessionError",
    "MCPTimeout",
    "MCPTool",
    "MCPToolError",
    "extract_mcp_content_item",
]
