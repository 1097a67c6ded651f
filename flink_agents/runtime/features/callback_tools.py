"""The built-in callback tools a chat model setup may offer its model.

List ``"create_callback"`` and/or ``"cancel_operation"`` in a setup's
``tools`` (no resource needed). A model then runs asynchronous operations:

1. it calls ``create_callback(purpose, timeout_seconds)``, which returns at
   once ``{pending: true, operation_id, callback_id, resolve_url, reject_url,
   timeout_seconds}``, and hands the URLs to an outside system (through
   another tool);
2. when it answers without asking for tools while operations are still open,
   the chat action waits for them (each racing its deadline; the run is
   parked meanwhile) and sends the outcomes in one user message, each body
   wrapped as untrusted data (``runtime.features.untrusted``); the model goes on;
3. ``cancel_operation(operation_id)`` ends a wait early; a completion that
   came first stays.

The operation id is the callback id. A model can cancel only callbacks of
its own key and record.

A model gets these tools only from a setup that lists them: the tool action
runs only the tools its request offered (``ToolRequestEvent.offered_tools``),
so a call to ``create_callback`` that the setup did not offer is refused
with an error result (``runtime.builtin_actions.ToolNotOffered``) and
registers no callback: a model steered by its input cannot park a key.
"""

from __future__ import annotations

from typing import Any, Dict

from flink_agents.api.callbacks import CANCEL_OPERATION_TOOL, CREATE_CALLBACK_TOOL
from flink_agents.api.tools.tool import Tool, ToolMetadata, ToolType
from flink_agents.runtime.features.callbacks import body_as_text
from flink_agents.runtime.features.untrusted import UNTRUSTED_NOTICE, wrap_untrusted
from flink_agents.stores.callbacks import CLOSED, REJECTED, RESOLVED, TIMED_OUT, CallbackRecord

__all__ = ["BuiltinCallbackTool", "builtin_callback_tool", "outcome_message"]

_METADATA = {
    CREATE_CALLBACK_TOOL: ToolMetadata(
        name=CREATE_CALLBACK_TOOL,
        description=(
            "Start waiting for an outside system to report back. Returns at once with a "
            "resolve_url and a reject_url to give to that system; its answer arrives in a later "
            "message, or a timeout after timeout_seconds."
        ),
        args_schema={
            "type": "object",
            "properties": {
                "purpose": {"type": "string", "description": "What you are waiting for."},
                "timeout_seconds": {
                    "type": "number",
                    "description": "How long to wait, from 1 to 86400 seconds.",
                },
            },
            "required": ["purpose", "timeout_seconds"],
        },
    ),
    CANCEL_OPERATION_TOOL: ToolMetadata(
        name=CANCEL_OPERATION_TOOL,
        description="Stop waiting for an operation started with create_callback.",
        args_schema={
            "type": "object",
            "properties": {"operation_id": {"type": "string", "description": "The operation's id."}},
            "required": ["operation_id"],
        },
    ),
}


class BuiltinCallbackTool(Tool):
    """A built-in tool; the tool action runs it with the calling context."""

    @classmethod
    def tool_type(cls) -> ToolType:
        return ToolType.FUNCTION

    def call(self, **kwargs: Any) -> Any:
        raise RuntimeError(f"built-in tool {self.metadata.name!r} runs only inside the tool action")

    async def run_in(self, ctx: Any, arguments: Dict[str, Any]) -> Dict[str, Any]:
        """Run the tool for the action context ``ctx``.

        Raises:
            ValueError: A bad argument (named); the model sees the error.
        """
        if self.metadata.name == CREATE_CALLBACK_TOOL:
            callback = await ctx.create_callback(str(arguments.get("purpose", "")), arguments.get("timeout_seconds"))
            return {
                "pending": True,
                "operation_id": callback.callback_id,
                "callback_id": callback.callback_id,
                "resolve_url": callback.resolve_url,
                "reject_url": callback.reject_url,
                "timeout_seconds": callback.timeout_s,
            }
        operation_id = arguments.get("operation_id")
        if not isinstance(operation_id, str) or not operation_id:
            raise ValueError("cancel_operation needs operation_id, the id create_callback returned")
        record = await ctx.callbacks.cancel_for_run(ctx.callback_ref(), operation_id)
        if record is None:
            raise ValueError(f"no operation {operation_id!r} was started in this run")
        return {"operation_id": operation_id, "cancelled": record.state in ("cancelled", CLOSED), "state": record.state}


def builtin_callback_tool(name: str) -> BuiltinCallbackTool:
    """The built-in tool ``name`` (one of ``BUILTIN_CALLBACK_TOOLS``)."""
    return BuiltinCallbackTool(metadata=_METADATA[name])


def outcome_message(operation_id: str, record: CallbackRecord) -> str:
    """How an operation's outcome reads to the model; outside text wrapped."""
    head = f"Operation {operation_id} ({record.purpose!r})"
    if record.state == RESOLVED:
        block = wrap_untrusted(body_as_text(record.body), f"callback {operation_id} resolve")
        return f"{head} completed. {UNTRUSTED_NOTICE}\n{block}"
    if record.state == REJECTED:
        block = wrap_untrusted(body_as_text(record.body), f"callback {operation_id} reject")
        return f"{head} was rejected. {UNTRUSTED_NOTICE}\n{block}"
    if record.state == TIMED_OUT:
        seconds = (record.deadline_ms - record.created_ms) / 1000.0
        return f"{head} timed out after {seconds:g} s without an answer."
    return f"{head} was cancelled."
