"""Builds an agent's resources from its plan, once per operator instance."""

from __future__ import annotations

import threading
from typing import Any, Dict, Tuple

from flink_agents.api.callbacks import BUILTIN_CALLBACK_TOOLS
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import Resource, ResourceType
from flink_agents.api.tools.tool import FunctionTool, ToolMetadata
from flink_agents.plan.agent_plan import AgentPlan, ResourceKind, ResourceSpec

__all__ = ["ResourceCache"]


class ResourceCache:
    """Creates each resource on first use and keeps it until ``close``.

    Resources are shared by every key of the operator instance, so they must
    be safe to use from concurrent runs (the SDK clients are).
    """

    def __init__(self, plan: AgentPlan) -> None:
        self._plan = plan
        self._built: Dict[Tuple[ResourceType, str], Resource] = {}
        self._lock = threading.RLock()

    def get(self, name: str, type: ResourceType) -> Resource:
        """The resource ``name`` of kind ``type``.

        Raises:
            KeyError: The plan has no such resource.
        """
        type = ResourceType(type)
        found = self._built.get((type, name))
        if found is not None:
            return found
        with self._lock:
            found = self._built.get((type, name))
            if found is None and type == ResourceType.TOOL and name in BUILTIN_CALLBACK_TOOLS and not self._plan.has_resource(name, type):
                from flink_agents.runtime.features.callback_tools import builtin_callback_tool

                found = self._built[(type, name)] = builtin_callback_tool(name)
            if found is None:
                found = self._build(self._plan.resource_spec(name, type))
                self._built[(type, name)] = found
            return found

    def _build(self, spec: ResourceSpec) -> Resource:
        resource: Any
        if spec.kind == ResourceKind.AGENT:
            from flink_agents.runtime.features.sub_agents import LocalSubAgentHandle

            assert spec.child is not None  # the compiler sets it
            return LocalSubAgentHandle(spec.name, spec.child)  # type: ignore[return-value]
        if spec.kind == ResourceKind.PROMPT:
            resource = Prompt.model_validate(spec.value)
        elif spec.kind == ResourceKind.FUNCTION_TOOL:
            assert spec.function is not None and spec.value is not None  # compiler sets both
            resource = FunctionTool(
                metadata=ToolMetadata.model_validate(spec.value), func=spec.function.resolve()
            )
        else:
            assert spec.descriptor is not None  # DESCRIPTOR and SERIALIZED carry one
            cls = spec.descriptor.clazz
            resource = cls(**spec.descriptor.arguments, get_resource=self.get)
        if isinstance(resource, Resource) and resource.get_resource is None:
            resource.get_resource = self.get
        resource.open()
        return resource

    def close(self) -> None:
        """Close every resource built so far (each once)."""
        with self._lock:
            built, self._built = self._built, {}
        errors = []
        for resource in built.values():
            try:
                resource.close()
            except Exception as exc:  # close the rest, then report
                errors.append(exc)
        if errors:
            raise errors[0]
