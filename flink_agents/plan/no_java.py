"""Refuse, at plan compile, what 0.3.1 runs on the JVM.

Flink Agents 0.3.1 lets an agent name Java actions (``JavaFunction``),
Java tools (a ``FunctionTool`` of a ``JavaFunction``) and Java resources
(a class marked ``@java_resource``: ``JavaChatModelSetup`` and the other
wrappers of ``ResourceName.*.JAVA_WRAPPER_*``), run by its Java operator.
This runtime is pure Python: there is no JVM in its operator to build or
call them. Compiling a plan that uses one fails here, naming it, instead
of at the first record on a worker (docs/compatibility.md, "No Java").
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from flink_agents.api.decorators import JAVA_RESOURCE_ATTR
from flink_agents.api.function import JavaFunction
from flink_agents.api.resource import ResourceDescriptor, ResourceName
from flink_agents.plan.errors import PlanError

__all__ = ["check_action_function", "check_resource"]

_WHY = "this runtime is pure Python and has no JVM-side resources, actions or tools"

# 0.3.1's wrapper classes by name, so a descriptor naming one is refused
# without importing anything.
_JAVA_WRAPPERS = frozenset({
    ResourceName.ChatModel.JAVA_WRAPPER_CONNECTION,
    ResourceName.ChatModel.JAVA_WRAPPER_SETUP,
    ResourceName.EmbeddingModel.JAVA_WRAPPER_CONNECTION,
    ResourceName.EmbeddingModel.JAVA_WRAPPER_SETUP,
    ResourceName.VectorStore.JAVA_WRAPPER_VECTOR_STORE,
    ResourceName.VectorStore.JAVA_WRAPPER_COLLECTION_MANAGEABLE_VECTOR_STORE,
})


def check_action_function(where: str, function: Any) -> None:
    """Refuse an action whose function is a ``JavaFunction``.

    Args:
        where: The action, for the message (``action 'a1' of MyAgent``).
        function: What the action runs (its ``@action(target=...)`` or the
            function given to ``add_action``).

    Raises:
        PlanError: ``function`` is a ``JavaFunction``.
    """
    if isinstance(function, JavaFunction):
        raise PlanError(
            f"{where} is the Java method {function.describe()}: {_WHY}; write the action in Python"
        )


def _class_of(descriptor: ResourceDescriptor) -> Optional[type]:
    """The descriptor's class if its module is imported already (a class
    given as an object, or loaded by earlier code); never imports."""
    given = descriptor._class_object  # a class given as an object
    if given is not None:
        return given
    module = sys.modules.get(descriptor.target_module)
    if module is None:
        return None
    obj: Any = module
    for part in descriptor.target_clazz.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None


def _java_class_name(value: Any) -> Optional[str]:
    """The Java class a resource stands for (its ``java_clazz`` or
    ``java_class_name`` setting, else its wrapper's name), or None if it is
    not a Java resource."""
    if isinstance(value, ResourceDescriptor):
        name = f"{value.target_module}.{value.target_clazz}"
        cls = _class_of(value)
        if name not in _JAVA_WRAPPERS and not (cls is not None and getattr(cls, JAVA_RESOURCE_ATTR, False)):
            return None
        arguments = value.arguments
        return arguments.get("java_clazz") or arguments.get("java_class_name") or name
    if getattr(type(value), JAVA_RESOURCE_ATTR, False):
        return getattr(value, "java_class_name", None) or type(value).__qualname__
    return None


def check_resource(where: str, value: Any) -> None:
    """Refuse a Java resource or a Java tool.

    Args:
        where: The resource, for the message (``chat_model resource 'm' of MyAgent``).
        value: What the agent declared (a descriptor, an instance, a tool).

    Raises:
        PlanError: ``value`` is a Java resource or tool.
    """
    func = getattr(value, "func", None)
    if isinstance(func, JavaFunction):  # a FunctionTool of a Java method (YAML ``type: java``)
        raise PlanError(f"{where} is the Java method {func.describe()}: {_WHY}; write the tool in Python")
    java = _java_class_name(value)
    if java is not None:
        raise PlanError(f"{where} is the Java resource {java}: {_WHY}; declare a Python resource")
