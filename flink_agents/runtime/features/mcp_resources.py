"""An agent's MCP servers' tools and prompts, found by name.

When an agent declares MCP servers (``ResourceType.MCP_SERVER``), a
``TOOL`` or ``PROMPT`` name that no local resource has is looked up among
the servers' tools or prompts (``ResourceCache.get`` asks here). The first
such lookup lists every server's tools (or prompts), once per ``MCPServer``
instance, i.e. once per operator instance on Flink; the plan compiler does
not connect.

Name clashes: a local resource wins over an MCP tool or prompt of the same
name (the MCP one is then unreachable by that name); a name that two MCP
servers both offer is refused when it is looked up (``AmbiguousMCPName``,
naming both servers), never picked by declaration order.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

from flink_agents.api.resource import Resource, ResourceType

__all__ = ["AmbiguousMCPName", "MCPNameNotOffered", "mcp_resource", "offered_names"]


class AmbiguousMCPName(LookupError):
    """Two MCP servers of the agent offer the same tool or prompt name."""


class MCPNameNotOffered(KeyError):
    """No local resource and no MCP server of the agent has the name.

    ``str()`` names the servers and what each offers."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _listing(server: Any, type: ResourceType) -> List[Any]:
    return server.list_tools() if type == ResourceType.TOOL else server.list_prompts()


def offered_names(servers: Dict[str, Any], type: ResourceType) -> Dict[str, List[str]]:
    """Server name -> the names it offers of kind ``type`` (listing each server once)."""
    return {
        server_name: [item.name for item in _listing(server, type)]
        for server_name, server in servers.items()
    }


def mcp_resource(
    name: str,
    type: ResourceType,
    server_names: List[str],
    get_server: Callable[[str], Any],
    agent: str,
) -> Resource:
    """The tool or prompt ``name`` offered by one of the servers ``server_names``.

    Args:
        name: The tool or prompt name.
        type: ``ResourceType.TOOL`` or ``ResourceType.PROMPT``.
        server_names: The agent's MCP server resource names.
        get_server: Builds (or returns the built) server of a name.
        agent: The agent, for messages.

    Raises:
        MCPNameNotOffered: No server offers ``name`` (lists what each offers).
        AmbiguousMCPName: More than one server offers it.
        MCPServerUnavailable, MCPTimeout: A server could not be listed.
    """
    servers = {server_name: get_server(server_name) for server_name in server_names}
    found = []
    for server_name, server in servers.items():
        for item in _listing(server, type):
            if item.name == name:
                found.append((server_name, item))
    if len(found) > 1:
        raise AmbiguousMCPName(
            f"{type.value} {name!r} of {agent} is offered by more than one MCP server: "
            f"{', '.join(repr(s) for s, _ in found)}; declare it locally or use one server that offers it"
        )
    if not found:
        offered = offered_names(servers, type)
        raise MCPNameNotOffered(
            f"{agent} has no {type.value} resource {name!r}, and none of its MCP servers offers it "
            f"(offered: {offered})"
        )
    return found[0][1]
