"""Features on top of the record loop: callbacks, steering, progress,
conversations, retrieval, long-term memory, skills, MCP resources,
sub-agents.

``execution/`` names none of them: what a feature adds to a run it
registers in ``runtime.execution.extensions.EXTENSIONS`` through
``register_all``, which the engine calls when it is assembled
(``runtime.engine``). The engine builds the host-level features itself
(``CallbackHub``, ``SubAgentRunner``, steering mailboxes, progress, the event
log) and hands them to each run (``execution.run.RunServices``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flink_agents.runtime.execution.extensions import Extensions

__all__ = ["register_all"]


def register_all(extensions: "Extensions") -> None:
    """Register every feature's part of a run with ``extensions``
    (idempotent: registering again replaces each entry with itself):

    - the built-in callback tools (``callback_tools``) and the
      ``callback_timeout`` check (``callbacks``);
    - the agent's MCP servers' tools and prompts for names the plan does
      not declare (``mcp_resources``);
    - the sub-agent handle of an ``AGENT`` resource (``sub_agents``);
    - ``ctx.long_term_memory`` (``long_term_memory``);
    - the skill hooks of ``ResourceContext`` (``skills``).
    """
    from flink_agents.api.callbacks import BUILTIN_CALLBACK_TOOLS
    from flink_agents.api.resource import ResourceType
    from flink_agents.plan.agent_plan import ResourceKind
    from flink_agents.runtime.features.callback_tools import builtin_callback_tool
    from flink_agents.runtime.features.callbacks import validate_timeout
    from flink_agents.runtime.features.long_term_memory import long_term_memory_of
    from flink_agents.runtime.features.mcp_resources import mcp_resource
    from flink_agents.runtime.features.skills.tools import available_skills_prompt, skill_dirs
    from flink_agents.runtime.features.sub_agents import LocalSubAgentHandle

    for name in BUILTIN_CALLBACK_TOOLS:
        extensions.add_builtin_tool(name, builtin_callback_tool)

    def mcp_items(name: str, type: ResourceType, plan: Any, get: Any) -> Any:
        servers = plan.resources.get(ResourceType.MCP_SERVER)
        if not servers or type not in (ResourceType.TOOL, ResourceType.PROMPT):
            return None
        return mcp_resource(name, type, list(servers), lambda server: get(server, ResourceType.MCP_SERVER), plan.agent)

    extensions.add_undeclared_resources("mcp", mcp_items)

    def sub_agent(spec: Any) -> LocalSubAgentHandle:
        assert spec.child is not None  # the compiler sets it
        return LocalSubAgentHandle(spec.name, spec.child)

    extensions.add_resource_kind(ResourceKind.AGENT, sub_agent)
    extensions.set_context_hook("long_term_memory", long_term_memory_of)
    extensions.set_context_hook("callback_timeout", validate_timeout)
    extensions.set_context_hook("skills_prompt", available_skills_prompt)
    extensions.set_context_hook("skill_dirs", skill_dirs)
