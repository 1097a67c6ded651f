"""``ResourceContext``: what a resource sees of the agent it belongs to.

The runtime gives every resource it builds a context (the resource's
``resource_context`` field), through which the resource reaches the other
resources of the same agent by name, as in Flink Agents 0.3.1: a chat model
setup fetches its connection, prompt and tools with
``self.resource_context.get_resource(name, ResourceType....)``. The runtime's
implementation lives in ``flink_agents.runtime.execution.resources``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, List

if TYPE_CHECKING:
    from flink_agents.api.resource import Resource, ResourceType

__all__ = ["ResourceContext"]


class ResourceContext(ABC):
    """Access from one resource to the other resources of its agent.

    A context stays valid for the resource's whole life (from creation to
    ``close``); resources are shared by every key of an operator instance, so
    a context is too.
    """

    @abstractmethod
    def get_resource(self, name: str, resource_type: "ResourceType") -> "Resource":
        """The resource ``name`` of kind ``resource_type`` declared in the same
        agent (or on its environment), built and opened on first use.

        Raises:
            KeyError: The agent has no such resource; the message names the
                resource asking, the missing name and its kind.
        """

    def generate_available_skills_prompt(self, *skill_names: str) -> str:
        """Prompt text describing the named skills (all when none is named).

        Returns:
            The text, or ``""`` when the agent has no skills configured (the
            default here; runtimes with skills override it), as in Flink
            Agents 0.3.1.
        """
        return ""

    def get_skill_dirs(self, *skill_names: str) -> List[str]:
        """Absolute directories of the named skills that live on a filesystem.

        Returns:
            The directories; ``[]`` when no skills are configured (the default
            here), as in Flink Agents 0.3.1.
        """
        return []
