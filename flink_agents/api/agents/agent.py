"""The ``Agent`` base class users subclass or build up programmatically."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from flink_agents.api.events.event import Event
from flink_agents.api.function import Function, PythonFunction
from flink_agents.api.resource import ResourceType

__all__ = ["Agent", "STRUCTURED_OUTPUT"]

# Key of a structured answer in ``ChatResponseEvent.response.extra_args``:
# the value validated against the request's output schema (a model instance,
# a ``pyflink.common.Row`` or a JSON value), as in Flink Agents 0.3.1.
STRUCTURED_OUTPUT = "structured_output"


class Agent:
    """An agent: actions reacting to events, and the resources they use.

    Declare actions and resources with the decorators of
    ``flink_agents.api.decorators`` on a subclass, or add them to an instance
    with ``add_action`` and ``add_resource``; both end up in the agent's plan
    (``flink_agents.plan.AgentPlan.from_agent``).
    """

    def __init__(self) -> None:
        self._actions: Dict[str, Tuple[List[type[Event] | str], Any, Optional[Dict[str, Any]]]] = {}
        # One (empty) dict per kind, as in Flink Agents 0.3.1, so that
        # ``agent.resources[ResourceType.TOOL]`` works before any is added.
        self._resources: Dict[ResourceType, Dict[str, Any]] = {t: {} for t in ResourceType}

    @property
    def actions(self) -> Dict[str, Tuple[List[type[Event] | str], Any, Optional[Dict[str, Any]]]]:
        """Actions added with ``add_action``: name -> (trigger conditions,
        function, config), as in 0.3.1: the function is a ``Function``
        descriptor (``PythonFunction``, ``JavaFunction``) or, for a callable
        with no name to import it by (a ``functools.partial``), the callable;
        config is None when none was given."""
        return self._actions

    @property
    def resources(self) -> Dict[ResourceType, Dict[str, Any]]:
        """Resources added with ``add_resource``: type -> name -> resource."""
        return self._resources

    def add_action(
        self,
        name: str,
        events: List[type[Event] | str] | None = None,
        func: Callable[..., Any] | Function | None = None,
        *,
        trigger_conditions: List[type[Event] | str] | None = None,
        **config: Any,
    ) -> "Agent":
        """Add an action.

        The second argument is named ``events`` as in Flink Agents 0.3.1 and
        may be given as ``trigger_conditions=`` as in HEAD; positionally,
        ``add_action(name, [...], func)``, it is the same argument either way.

        Args:
            name: Unique action name.
            events: Event classes, event-type strings or condition
                expressions (as ``@action`` takes them), combined with OR.
            func: ``(event, ctx) -> None``, plain or async, or a ``Function``
                descriptor, stored as it is (0.3.1). A function is stored as
                its ``PythonFunction`` (which keeps it at hand), as 0.3.1
                does. A ``JavaFunction`` makes the plan fail to compile: this
                runtime has no JVM.
            trigger_conditions: Flink Agents HEAD's name for ``events``.
            **config: Values the action reads through ``ctx.action_config``.

        Raises:
            ValueError: An action of this name exists.
            TypeError: Both or neither of ``trigger_conditions`` and
                ``events`` given, or no ``func``.
        """
        if (trigger_conditions is None) == (events is None):
            raise TypeError(
                f"add_action({name!r}): give the trigger conditions once, as trigger_conditions "
                "(Flink Agents HEAD) or events (0.3.1)"
            )
        if func is None:
            raise TypeError(f"add_action({name!r}): func is missing")
        if name in self._actions:
            raise ValueError(f"action {name!r} is already defined")
        if not isinstance(func, Function) and isinstance(getattr(func, "__qualname__", None), str):
            func = PythonFunction.from_callable(func)
        conditions = events if events is not None else trigger_conditions
        self._actions[name] = (list(conditions), func, dict(config) if config else None)
        return self

    def add_resource(self, name: str, resource_type: ResourceType, instance: Any) -> "Agent":
        """Add a resource.

        Args:
            name: Name unique within ``resource_type``.
            resource_type: Its kind.
            instance: A ``ResourceDescriptor``, a ``SerializableResource``
                (a ``Prompt``, a ``Tool``), a plain function for a tool, or an
                ``Agent`` for ``ResourceType.AGENT``.

        The argument order and names are Flink Agents 0.3.1's
        (``add_resource(name, resource_type, instance)``).

        Raises:
            ValueError: A resource of this kind and name exists, or
                ``resource_type`` is not a ``ResourceType`` (or its value).
            TypeError: ``instance`` is None or a str (give a
                ``ResourceDescriptor(clazz="pkg.module.Class", ...)`` for a
                class named by text).
        """
        if instance is None or isinstance(instance, str):
            raise TypeError(
                f"add_resource({name!r}): instance is {instance!r}; expected a ResourceDescriptor, "
                "a SerializableResource, a function (for a tool) or an Agent (for ResourceType.AGENT)"
            )
        by_name = self._resources.setdefault(ResourceType(resource_type), {})
        if name in by_name:
            raise ValueError(f"{ResourceType(resource_type).value} resource {name!r} is already defined")
        by_name[name] = instance
        return self
