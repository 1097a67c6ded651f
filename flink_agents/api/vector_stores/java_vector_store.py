"""0.3.1's Python-side wrappers of Java vector stores, at 0.3.1's module path.

As ``api.chat_models.java_chat_model``: in 0.3.1 these stand for vector
stores built on the JVM (``ResourceName.VectorStore.Java.*``: Elasticsearch,
OpenSearch, S3 Vectors, Milvus). This runtime has no JVM-side resources, so
a plan declaring one fails to compile, naming the resource
(docs/compatibility.md).
"""

from __future__ import annotations

from flink_agents.api.decorators import java_resource
from flink_agents.api.vector_stores.vector_store import BaseVectorStore, CollectionManageableVectorStore

__all__ = ["JavaCollectionManageableVectorStore", "JavaVectorStore"]


@java_resource
class JavaVectorStore(BaseVectorStore):
    """Stands for a Java vector store (0.3.1's wrapper); never built here.

    Attributes:
        java_class_name: The Java class (0.3.1's field).
    """

    java_class_name: str = ""


@java_resource
class JavaCollectionManageableVectorStore(JavaVectorStore, CollectionManageableVectorStore):
    """Stands for a Java vector store that manages collections (0.3.1's
    wrapper); never built here."""
