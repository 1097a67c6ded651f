"""0.3.1's Python-side wrappers of Java chat models, at 0.3.1's module path.

In Flink Agents 0.3.1 a ``ResourceDescriptor`` whose ``clazz`` is one of
these (``ResourceName.ChatModel.JAVA_WRAPPER_CONNECTION``/``_SETUP``) names a
Java chat model (``java_clazz``, e.g. ``ResourceName.ChatModel.Java.OLLAMA_SETUP``)
that its Java operator builds on the JVM. This runtime is pure Python and
has no JVM-side resources: the classes exist so such code imports, and a
plan declaring one fails to compile, naming the resource
(``flink_agents.plan.compiler``; docs/compatibility.md).
"""

from __future__ import annotations

from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.decorators import java_resource

__all__ = ["JavaChatModelConnection", "JavaChatModelSetup"]


@java_resource
class JavaChatModelConnection(BaseChatModelConnection):
    """Stands for a Java chat model connection (0.3.1's wrapper); never built here.

    Attributes:
        java_class_name: The Java class (0.3.1's field).
    """

    java_class_name: str = ""


@java_resource
class JavaChatModelSetup(BaseChatModelSetup):
    """Stands for a Java chat model setup (0.3.1's wrapper); never built here.

    Attributes:
        java_class_name: The Java class (0.3.1's field).
    """

    java_class_name: str = ""
