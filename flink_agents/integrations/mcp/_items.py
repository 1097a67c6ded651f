"""``MCPTool`` and ``MCPPrompt``: one tool or prompt of an ``MCPServer``
(importable from ``flink_agents.integrations.mcp.mcp``, 0.3.1's path)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from pydantic import Field, field_validator

from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.tools.tool import Tool, ToolType
from flink_agents.integrations.mcp.utils import content_text_for_model

if TYPE_CHECKING:
    from flink_agents.integrations.mcp.mcp import MCPServer

__all__ = ["MCPPrompt", "MCPTool", "MCPToolError"]


class MCPToolError(RuntimeError):
    """An MCP tool answered with ``isError``: the tool failed, the server is
    fine. ``str()`` is ``"MCP tool '<tool>' of server '<server>' failed: <the
    server's text>"``; a chat model gets it as its ``Error: ...`` result."""


class MCPTool(Tool):
    """One tool of an MCP server (``metadata.args_schema`` is its ``inputSchema``).

    Attributes:
        mcp_server: The ``MCPServer`` it belongs to (not serialized).
    """

    mcp_server: Any = Field(default=None, exclude=True, repr=False)

    @classmethod
    def tool_type(cls) -> ToolType:
        return ToolType.MCP

    def _server(self) -> "MCPServer":
        if self.mcp_server is None:
            raise ValueError(f"MCP tool {self.name!r} has no MCP server (mcp_server is None)")
        return self.mcp_server

    @staticmethod
    def _arguments(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
        if kwargs:
            return dict(kwargs)
        if len(args) == 1 and isinstance(args[0], dict):
            return dict(args[0])
        if args:
            raise TypeError("an MCP tool takes its arguments by name (or one dict of them)")
        return {}

    def call(self, *args: Any, **kwargs: Any) -> List[Any]:
        """Run the tool and wait for its value (``extract_call_tool_result``'s list).

        Raises:
            MCPToolError: The tool answered with ``isError``.
            MCPServerUnavailable: The server could not be reached after ``max_retries`` reconnects.
            MCPTimeout: No answer within the server's ``timeout`` seconds.
        """
        return self._server().call_tool(self.name, self._arguments(args, kwargs))

    async def acall(self, *args: Any, **kwargs: Any) -> List[Any]:
        """``call`` as a coroutine, on the caller's loop (no thread held)."""
        return await self._server().call_tool_async(self.name, self._arguments(args, kwargs))

    def result_for_model(self, value: Any, error: str | None = None) -> str:
        """What a chat model is shown of this tool's value (or of its
        failure ``error``): the text of ``utils.content_text_for_model``,
        wrapped as untrusted data from ``mcp:<server>/<tool>``."""
        from flink_agents.runtime.durable import wrap_untrusted

        source = f"mcp:{self._server().label_name}/{self.name}"
        if error is not None:
            return "Error: " + wrap_untrusted(error, source)
        return wrap_untrusted(content_text_for_model(value), source)


class MCPPrompt(Prompt):
    """A prompt of an MCP server, filled by the server.

    Attributes:
        name: Its name on the server.
        title, description: As the server lists them.
        prompt_arguments: ``[{"name", "description", "required"}]``.
        mcp_server: The ``MCPServer`` (not serialized).
    """

    name: str
    title: str | None = None
    description: str | None = None
    prompt_arguments: List[Dict[str, Any]] = Field(default_factory=list)
    mcp_server: Any = Field(default=None, exclude=True, repr=False)

    @field_validator("prompt_arguments", mode="before")
    @classmethod
    def _arguments_as_dicts(cls, value: Any) -> Any:
        # 0.3.1 kept ``mcp.types.PromptArgument`` objects here.
        if isinstance(value, list):
            return [v.model_dump(include={"name", "description", "required"}) if hasattr(v, "model_dump") else v
                    for v in value]
        return value

    def _checked(self, arguments: Dict[str, Any]) -> Dict[str, str]:
        """The declared arguments among ``arguments``, as text; others are ignored.

        Raises:
            ValueError: A required argument is missing (names it and the prompt).
        """
        if self.mcp_server is None:
            raise ValueError(f"MCP prompt {self.name!r} has no MCP server (mcp_server is None)")
        chosen: Dict[str, str] = {}
        for argument in self.prompt_arguments:
            name = argument["name"]
            if name in arguments and arguments[name] is not None:
                chosen[name] = str(arguments[name])
            elif argument.get("required"):
                raise ValueError(
                    f"MCP prompt {self.name!r} of server {self.mcp_server.label_name!r} "
                    f"needs argument {name!r}, which was not given"
                )
        return chosen

    def format_messages(self, role: MessageRole = MessageRole.SYSTEM, **arguments: Any) -> List[ChatMessage]:
        """The server's messages for ``arguments``, with the roles the server
        gave (``role`` is not used, as in 0.3.1); non-text content becomes
        text as ``utils.content_text_for_model`` shows it.

        Raises:
            ValueError: A required argument is missing.
            MCPServerUnavailable, MCPTimeout: As ``MCPServer.get_prompt``.
        """
        return self.mcp_server.get_prompt(self.name, self._checked(arguments))

    def format_string(self, **arguments: Any) -> str:
        """The messages' contents joined one per line."""
        return "\n".join(m.content for m in self.format_messages(**arguments))
