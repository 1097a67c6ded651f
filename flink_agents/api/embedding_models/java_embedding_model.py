"""0.3.1's Python-side wrappers of Java embedding models, at 0.3.1's module path.

As ``api.chat_models.java_chat_model``: in 0.3.1 these stand for embedding
models built on the JVM (``ResourceName.EmbeddingModel.Java.*``). This
runtime has no JVM-side resources, so a plan declaring one fails to
compile, naming the resource (docs/compatibility.md).
"""

from __future__ import annotations

from flink_agents.api.decorators import java_resource
from flink_agents.api.embedding_models.embedding_model import BaseEmbeddingModelConnection, BaseEmbeddingModelSetup

__all__ = ["JavaEmbeddingModelConnection", "JavaEmbeddingModelSetup"]


@java_resource
class JavaEmbeddingModelConnection(BaseEmbeddingModelConnection):
    """Stands for a Java embedding model connection (0.3.1's wrapper); never built here.

    Attributes:
        java_class_name: The Java class (0.3.1's field).
    """

    java_class_name: str = ""


@java_resource
class JavaEmbeddingModelSetup(BaseEmbeddingModelSetup):
    """Stands for a Java embedding model setup (0.3.1's wrapper); never built here.

    Attributes:
        java_class_name: The Java class (0.3.1's field).
    """

    java_class_name: str = ""
