"""MCP servers as resources: their tools and prompts become the agent's.

``MCPServer`` (Flink Agents 0.3.1's fields, plus stdio, ``token`` and
reconnects) holds one persistent session (``_connection.MCPConnection``): a
stdio server is spawned once per ``MCPServer`` instance (once per operator
instance on Flink), not per call. Its tool and prompt lists are fetched at
first use and cached for the instance's life; nothing connects when the
plan is compiled (the client submitting a job may not reach the server).

``MCPTool`` (``_items``) is a ``Tool`` whose ``call``/``acall`` run ``tools/call``; its
value is ``utils.extract_call_tool_result``'s list, and a result with
``isError`` raises ``MCPToolError``. ``MCPPrompt`` is a ``Prompt`` filled by
the server (``prompts/get``); a missing required argument is a
``ValueError`` naming it.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, List, Tuple
from urllib.parse import urlparse

from pydantic import Field, PrivateAttr, field_serializer, model_validator

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.redaction import redact_text
from flink_agents.api.resource import Resource, ResourceType
from flink_agents.api.tools.tool import ToolMetadata
from flink_agents.integrations.mcp._connection import MCPConnection, MCPServerUnavailable, MCPSessionError, MCPTimeout
from flink_agents.integrations.mcp._items import MCPPrompt, MCPTool, MCPToolError
from flink_agents.integrations.mcp.utils import content_text_for_model, extract_call_tool_result, extract_mcp_content_item
from flink_agents.integrations.sdk import import_sdk

__all__ = [
    "MCPPrompt", "MCPServer", "MCPServerUnavailable", "MCPSessionError", "MCPTimeout", "MCPTool", "MCPToolError",
]

_EXTRA = "mcp"


def _sdk(module: str) -> Any:
    return import_sdk(module, _EXTRA, "MCPServer")


class MCPServer(Resource):
    """An MCP server reached over streamable HTTP (``endpoint``) or stdio (``command``).

    Attributes:
        endpoint: ``http(s)://host:port/path`` of a streamable-HTTP server.
        headers: HTTP headers sent with every request.
        timeout: Seconds to wait for one request's answer (and to connect).
        sse_read_timeout: Seconds an HTTP stream may stay silent.
        auth: An ``httpx2.Auth`` (the ``mcp`` SDK's HTTP client) for HTTP; in
            a plan it travels cloudpickled (base64), as in 0.3.1.
        token: A bearer token: sent as ``Authorization: Bearer <token>``.
        command, args, env, cwd: The stdio server to spawn (``env`` is added
            to the SDK's safe default environment).
        max_retries: Reconnects per request after a broken connection
            (0: none); then ``MCPServerUnavailable``.
        retry_backoff_s: Wait before the first reconnect, doubled after each.

    Exactly one of ``endpoint`` and ``command`` is set (a ``ValueError`` otherwise).
    """

    endpoint: str | None = None
    headers: Dict[str, Any] | None = None
    timeout: float = 30.0
    sse_read_timeout: float = 60.0 * 5
    auth: Any = None
    token: str | None = Field(default=None, repr=False)
    command: str | None = None
    args: List[str] = Field(default_factory=list)
    env: Dict[str, str] | None = None
    cwd: str | None = None
    max_retries: int = Field(default=3, ge=0)
    retry_backoff_s: float = Field(default=0.5, ge=0)

    _connection: MCPConnection | None = PrivateAttr(default=None)
    _tools: List[MCPTool] | None = PrivateAttr(default=None)
    _prompts: List[MCPPrompt] | None = PrivateAttr(default=None)
    _resource_name: str | None = PrivateAttr(default=None)

    @field_serializer("auth")
    def _serialize_auth(self, auth: Any) -> str | None:
        if auth is None or isinstance(auth, str):
            return auth
        import cloudpickle

        return base64.b64encode(cloudpickle.dumps(auth)).decode()

    @model_validator(mode="before")
    @classmethod
    def _load_auth(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("auth"), str):
            import cloudpickle

            data = {**data, "auth": cloudpickle.loads(base64.b64decode(data["auth"]))}
        return data

    @model_validator(mode="after")
    def _one_transport(self) -> "MCPServer":
        if (self.endpoint is None) == (self.command is None):
            raise ValueError("MCPServer needs exactly one of endpoint (streamable HTTP) and command (stdio)")
        if self.endpoint is not None:
            parsed = urlparse(self.endpoint)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ValueError(f"MCPServer endpoint must be an http(s) URL, got {redact_text(self.endpoint)!r}")
        if self.timeout <= 0 or self.sse_read_timeout <= 0:
            raise ValueError("MCPServer timeout and sse_read_timeout are seconds and must be > 0")
        return self

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.MCP_SERVER

    # -- identity -----------------------------------------------------------

    def bind_resource_name(self, name: str) -> None:
        """Set the name the agent declares this server under (the runtime
        does), used in messages and untrusted-data sources."""
        self._resource_name = name

    @property
    def label_name(self) -> str:
        """The declared resource name, else the endpoint or command."""
        return self._resource_name or redact_text(self.endpoint or self.command or "?")

    @property
    def label(self) -> str:
        where = self.endpoint if self.endpoint is not None else " ".join([self.command or "", *self.args])
        where = redact_text(where)  # a password in the URL, a token=... argument
        return f"{self._resource_name!r} ({where})" if self._resource_name else f"({where})"

    # -- the session --------------------------------------------------------

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[Tuple[Any, Any]]:
        if self.command is not None:
            stdio = _sdk("mcp.client.stdio")
            parameters = stdio.StdioServerParameters(command=self.command, args=self.args, env=self.env, cwd=self.cwd)
            async with stdio.stdio_client(parameters, errlog=_server_errlog()) as streams:
                yield streams[0], streams[1]
            return
        httpx2 = _sdk("httpx2")
        streamable = _sdk("mcp.client.streamable_http")
        headers = {str(k): str(v) for k, v in (self.headers or {}).items()}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        client = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(self.timeout, read=self.sse_read_timeout),
            auth=self.auth,
        )
        async with client, streamable.streamable_http_client(self.endpoint, http_client=client) as streams:
            yield streams[0], streams[1]

    def _session(self) -> MCPConnection:
        if self._connection is None:
            self._connection = MCPConnection(
                self.label, self._transport, self.timeout, self.max_retries, self.retry_backoff_s
            )
        return self._connection

    def _run(self, request: Any) -> Any:
        """Run ``request(session)`` and wait (any thread but the session's own)."""
        return self._session().submit(request).result()

    async def _arun(self, request: Any) -> Any:
        return await asyncio.wrap_future(self._session().submit(request))

    # -- tools ----------------------------------------------------------------

    async def _list_tools(self, session: Any) -> List[MCPTool]:
        tools, cursor = [], None
        while True:
            params = None if cursor is None else _sdk("mcp.types").PaginatedRequestParams(cursor=cursor)
            page = await session.list_tools(params=params)
            for data in page.tools or []:
                schema = data.input_schema or {"type": "object", "properties": {}}
                metadata = ToolMetadata(name=data.name, description=data.description or "", args_schema=schema)
                tools.append(MCPTool(metadata=metadata, mcp_server=self))
            cursor = page.next_cursor
            if cursor is None:
                return tools

    def list_tools(self) -> List[MCPTool]:
        """The server's tools, listed at the first call and cached for this instance.

        Raises:
            MCPServerUnavailable, MCPTimeout: The server could not be asked.
        """
        if self._tools is None:
            self._tools = self._run(self._list_tools)
        return list(self._tools)

    def get_tool(self, name: str) -> MCPTool:
        """The tool ``name``.

        Raises:
            KeyError: The server has no such tool (names the ones it has).
        """
        for tool in self.list_tools():
            if tool.name == name:
                return tool
        raise KeyError(f"MCP server {self.label} has no tool {name!r} (it has: {[t.name for t in self.list_tools()]})")

    def get_tool_metadata(self, name: str) -> ToolMetadata:
        """The metadata of tool ``name`` (``KeyError`` as ``get_tool``)."""
        return self.get_tool(name).metadata

    def _tool_request(self, name: str, arguments: Dict[str, Any]) -> Any:
        async def request(session: Any) -> List[Any]:
            result = await session.call_tool(name, arguments, read_timeout_seconds=self.timeout)
            value = extract_call_tool_result(result)
            if result.is_error:
                raise MCPToolError(
                    f"MCP tool {name!r} of server {self.label_name!r} failed: {content_text_for_model(value)}"
                )
            return value

        return request

    def call_tool(self, name: str, arguments: Dict[str, Any] | None = None) -> List[Any]:
        """Call tool ``name`` and wait; see ``MCPTool.call``."""
        return self._run(self._tool_request(name, dict(arguments or {})))

    async def call_tool_async(self, tool_name: str, *args: Any, **kwargs: Any) -> List[Any]:
        """Call tool ``tool_name`` with ``kwargs`` (or one dict positional), as
        0.3.1 spells it; awaitable on any loop. See ``MCPTool.call``."""
        arguments = kwargs if kwargs else (args[0] if args else {})
        return await self._arun(self._tool_request(tool_name, dict(arguments)))

    # -- prompts ----------------------------------------------------------------

    async def _list_prompts(self, session: Any) -> List[MCPPrompt]:
        capabilities = session.server_capabilities
        if capabilities is None or capabilities.prompts is None:
            return []
        prompts, cursor = [], None
        while True:
            params = None if cursor is None else _sdk("mcp.types").PaginatedRequestParams(cursor=cursor)
            page = await session.list_prompts(params=params)
            for data in page.prompts or []:
                arguments = [
                    {"name": a.name, "description": a.description, "required": bool(a.required)}
                    for a in data.arguments or []
                ]
                prompts.append(MCPPrompt(
                    name=data.name, title=data.title, description=data.description,
                    prompt_arguments=arguments, mcp_server=self,
                ))
            cursor = page.next_cursor
            if cursor is None:
                return prompts

    def list_prompts(self) -> List[MCPPrompt]:
        """The server's prompts (none if it does not offer prompts), listed at
        the first call and cached for this instance.

        Raises:
            MCPServerUnavailable, MCPTimeout: The server could not be asked.
        """
        if self._prompts is None:
            self._prompts = self._run(self._list_prompts)
        return list(self._prompts)

    def _prompt_request(self, name: str, arguments: Dict[str, str] | None) -> Any:
        async def request(session: Any) -> List[ChatMessage]:
            result = await session.get_prompt(name, arguments)
            return [
                ChatMessage(
                    role=MessageRole(message.role),
                    content=content_text_for_model([extract_mcp_content_item(message.content)]),
                )
                for message in result.messages
            ]

        return request

    def get_prompt(self, name: str, arguments: Dict[str, str] | None = None) -> List[ChatMessage]:
        """Prompt ``name`` filled by the server with ``arguments``.

        Raises:
            mcp.shared.exceptions.MCPError: The server refused (unknown prompt, bad arguments).
            MCPServerUnavailable, MCPTimeout: The server could not be asked.
        """
        return self._run(self._prompt_request(name, arguments))

    async def get_prompt_async(self, name: str, arguments: Dict[str, str] | None = None) -> List[ChatMessage]:
        """``get_prompt`` as a coroutine."""
        return await self._arun(self._prompt_request(name, arguments))

    @property
    def session(self) -> Any:
        """The open ``mcp.ClientSession``, or None (before first use, after
        ``close``). 0.3.1's field; it belongs to the session thread's event
        loop: use this class's methods, which run there, rather than it."""
        connection = self._connection
        current = None if connection is None else connection.current_session
        return current

    @property
    def connection_context(self) -> None:
        """0.3.1's exit stack of the connection: here a task of the session
        thread holds the connection open, so there is none (always None)."""
        return None

    @property
    def connections_opened(self) -> int:
        """Sessions opened so far (1 after first use; more after reconnects)."""
        return 0 if self._connection is None else self._connection.connections_opened

    def close(self) -> None:
        """End the session (a stdio server's process exits) and its thread."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _server_errlog() -> Any:
    """Where a stdio server's stderr goes: this process's stderr when it is a
    real file. In PyFlink's thread mode ``sys.stderr`` is the embedded
    interpreter's catcher, which has no file descriptor to hand a subprocess
    (the SDK's default would fail with "'StdErrCatcher' object has no
    attribute 'fileno'"): then the original stderr, else the null device."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    global _DEVNULL
    if _DEVNULL is None:
        _DEVNULL = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - kept for the process
    return _DEVNULL


_DEVNULL: Any = None
