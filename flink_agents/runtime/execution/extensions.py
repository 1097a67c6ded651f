"""Where features plug into the execution layer.

``execution/`` runs actions; it names no feature. What a feature adds to a
run (a resource the plan does not declare, a kind of resource it builds, a
hook behind a ``RunnerContext`` method) it registers here, in the one
registry ``EXTENSIONS``, when the engine is assembled
(``runtime.engine`` calls ``runtime.features.register_all(EXTENSIONS)``).
The execution layer asks the registry, never a feature module:

- **Built-in tools** (``add_builtin_tool``): a ``TOOL`` name every agent
  has unless it declares its own (the callback tools of
  ``api.callbacks.BUILTIN_CALLBACK_TOOLS``); ``ResourceCache.get`` asks.
- **Undeclared resources** (``add_undeclared_resources``): a provider asked,
  after the built-in tools, for a name the plan does not declare (the
  tools and prompts of the agent's MCP servers); it answers None when the
  name is not its.
- **Resource kinds** (``add_resource_kind``): how a resource of a plan kind
  is built (``ResourceKind.AGENT``: a sub-agent handle).
- **Context hooks** (``set_context_hook``, ``CONTEXT_HOOKS``): what
  ``ActionContext`` and ``ResourceContextImpl`` delegate to a feature:
  ``long_term_memory`` (``ctx.long_term_memory``), ``callback_timeout``
  (the check of ``ctx.create_callback``'s timeout), ``skills_prompt`` and
  ``skill_dirs`` (``ResourceContext``'s skill methods).

Registering again under the same name replaces (registration is
idempotent); a hook asked for but never registered raises a
``RuntimeError`` naming it.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional

from flink_agents.api.resource import Resource, ResourceType

__all__ = ["CONTEXT_HOOKS", "EXTENSIONS", "Extensions"]

# The hooks execution/ asks for, and what each is.
CONTEXT_HOOKS = {
    "long_term_memory": "(ctx) -> BaseLongTermMemory: ctx.long_term_memory",
    "callback_timeout": "(timeout_s) -> float: check ctx.create_callback's timeout, raising ValueError",
    "skills_prompt": "(get_resource, skill_names) -> str: ResourceContext.generate_available_skills_prompt",
    "skill_dirs": "(get_resource, skill_names) -> list[str]: ResourceContext.get_skill_dirs",
}

# (name, type, plan, get_resource) -> the resource, or None when ``name`` is not the provider's.
UndeclaredResources = Callable[[str, ResourceType, Any, Callable[[str, ResourceType], Resource]], Optional[Resource]]


class Extensions:
    """What features registered with the execution layer (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._builtin_tools: Dict[str, Callable[[str], Resource]] = {}
        self._undeclared: Dict[str, UndeclaredResources] = {}  # in registration order
        self._kinds: Dict[Any, Callable[[Any], Resource]] = {}
        self._hooks: Dict[str, Callable[..., Any]] = {}

    # -- registration (runtime.features.register_all) -----------------------

    def add_builtin_tool(self, name: str, build: Callable[[str], Resource]) -> None:
        """``build(name)`` makes the built-in ``TOOL`` ``name`` for an agent
        that does not declare a tool of that name."""
        with self._lock:
            self._builtin_tools[name] = build

    def add_undeclared_resources(self, provider: str, provide: UndeclaredResources) -> None:
        """``provide(name, type, plan, get_resource)`` is asked for a
        resource the plan does not declare (after the built-in tools and the
        providers registered before it); None: not its."""
        with self._lock:
            self._undeclared[provider] = provide

    def add_resource_kind(self, kind: Any, build: Callable[[Any], Resource]) -> None:
        """``build(spec)`` makes a resource of plan kind ``kind``
        (``plan.agent_plan.ResourceKind``) from its ``ResourceSpec``."""
        with self._lock:
            self._kinds[kind] = build

    def set_context_hook(self, name: str, hook: Callable[..., Any]) -> None:
        """Register the hook ``name`` (one of ``CONTEXT_HOOKS``).

        Raises:
            ValueError: ``name`` is not a hook the execution layer asks for.
        """
        if name not in CONTEXT_HOOKS:
            raise ValueError(f"no context hook {name!r}; the hooks: {sorted(CONTEXT_HOOKS)}")
        with self._lock:
            self._hooks[name] = hook

    # -- what the execution layer asks --------------------------------------

    def undeclared_resource(self, name: str, type: ResourceType, plan: Any,
                            get: Callable[[str, ResourceType], Resource]) -> Optional[Resource]:
        """The resource ``name`` of kind ``type`` that ``plan`` does not
        declare: a built-in tool, else the first provider's; None if none."""
        if type == ResourceType.TOOL:
            build = self._builtin_tools.get(name)
            if build is not None:
                return build(name)
        for provide in list(self._undeclared.values()):
            found = provide(name, type, plan, get)
            if found is not None:
                return found
        return None

    def resource_builder(self, kind: Any) -> Optional[Callable[[Any], Resource]]:
        """How a resource of plan kind ``kind`` is built, if a feature builds it."""
        return self._kinds.get(kind)

    def context_hook(self, name: str) -> Callable[..., Any]:
        """The hook ``name``.

        Raises:
            RuntimeError: No feature registered it (the engine registers
                every feature; code that runs actions without an engine
                calls ``runtime.features.register_all(EXTENSIONS)``).
        """
        hook = self._hooks.get(name)
        if hook is None:
            raise RuntimeError(
                f"no feature registered the context hook {name!r} ({CONTEXT_HOOKS.get(name, '?')}); "
                "runtime.features.register_all(runtime.execution.extensions.EXTENSIONS) registers them"
            )
        return hook


EXTENSIONS = Extensions()
