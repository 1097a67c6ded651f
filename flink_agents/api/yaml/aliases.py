"""Short names a YAML agent file may use: event aliases in ``listen_to`` and
class aliases in a resource's ``clazz``.

The tables are Flink Agents 0.3.1's (``flink_agents.api.yaml.aliases``
there): ``EVENT_ALIASES`` maps an alias to an ``EVENT_TYPE`` string,
``CLAZZ_ALIASES`` maps resource type -> language -> alias -> fully
qualified class name, with 0.3.1's class paths. An alias whose class
cannot be imported (a provider not shipped, or its module broken) is
refused by the loader, naming the alias. ``local`` (the offline
deterministic chat model) and ``hashing`` (the offline lexical embedding
model) are this project's additions.

The ``java`` buckets and ``JAVA_WRAPPER_CLAZZ`` are 0.3.1's too: a
``type: java`` resource loads as a ``ResourceDescriptor`` of the Python-side
wrapper class (``api.chat_models.java_chat_model`` and siblings) with the
Java class in its ``java_clazz`` argument, as in 0.3.1. This runtime has no
JVM, so a plan declaring one fails to compile, naming the resource
(docs/compatibility.md).
"""

from __future__ import annotations

from typing import Dict

from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.context_retrieval_event import (
    ContextRetrievalRequestEvent,
    ContextRetrievalResponseEvent,
)
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent
from flink_agents.api.resource import ResourceName, ResourceType

__all__ = [
    "AliasNotAvailable",
    "CLAZZ_ALIASES",
    "EVENT_ALIASES",
    "JAVA_WRAPPER_CLAZZ",
    "is_alias",
    "resolve_clazz",
    "resolve_event_type",
]

EVENT_ALIASES: Dict[str, str] = {
    "input": InputEvent.EVENT_TYPE,
    "output": OutputEvent.EVENT_TYPE,
    "chat_request": ChatRequestEvent.EVENT_TYPE,
    "chat_response": ChatResponseEvent.EVENT_TYPE,
    "tool_request": ToolRequestEvent.EVENT_TYPE,
    "tool_response": ToolResponseEvent.EVENT_TYPE,
    "context_retrieval_request": ContextRetrievalRequestEvent.EVENT_TYPE,
    "context_retrieval_response": ContextRetrievalResponseEvent.EVENT_TYPE,
}

CLAZZ_ALIASES: Dict[ResourceType, Dict[str, Dict[str, str]]] = {
    ResourceType.CHAT_MODEL_CONNECTION: {
        "python": {
            "ollama": ResourceName.ChatModel.OLLAMA_CONNECTION,
            "openai": ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION,
            "anthropic": ResourceName.ChatModel.ANTHROPIC_CONNECTION,
            "tongyi": ResourceName.ChatModel.TONGYI_CONNECTION,
            "azure_openai": ResourceName.ChatModel.AZURE_OPENAI_CONNECTION,
            "local": ResourceName.ChatModel.LOCAL_CONNECTION,
        },
        "java": {
            "ollama": ResourceName.ChatModel.Java.OLLAMA_CONNECTION,
            "openai_completions": ResourceName.ChatModel.Java.OPENAI_COMPLETIONS_CONNECTION,
            "openai_responses": ResourceName.ChatModel.Java.OPENAI_RESPONSES_CONNECTION,
            "anthropic": ResourceName.ChatModel.Java.ANTHROPIC_CONNECTION,
            "azure": ResourceName.ChatModel.Java.AZURE_CONNECTION,
            "bedrock": ResourceName.ChatModel.Java.BEDROCK_CONNECTION,
        },
    },
    ResourceType.CHAT_MODEL: {
        "python": {
            "ollama": ResourceName.ChatModel.OLLAMA_SETUP,
            "openai": ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
            "anthropic": ResourceName.ChatModel.ANTHROPIC_SETUP,
            "tongyi": ResourceName.ChatModel.TONGYI_SETUP,
            "azure_openai": ResourceName.ChatModel.AZURE_OPENAI_SETUP,
            "local": ResourceName.ChatModel.LOCAL_SETUP,
        },
        "java": {
            "ollama": ResourceName.ChatModel.Java.OLLAMA_SETUP,
            "openai_completions": ResourceName.ChatModel.Java.OPENAI_COMPLETIONS_SETUP,
            "openai_responses": ResourceName.ChatModel.Java.OPENAI_RESPONSES_SETUP,
            "anthropic": ResourceName.ChatModel.Java.ANTHROPIC_SETUP,
            "azure": ResourceName.ChatModel.Java.AZURE_SETUP,
            "bedrock": ResourceName.ChatModel.Java.BEDROCK_SETUP,
        },
    },
    ResourceType.EMBEDDING_MODEL_CONNECTION: {
        "python": {
            "ollama": ResourceName.EmbeddingModel.OLLAMA_CONNECTION,
            "openai": ResourceName.EmbeddingModel.OPENAI_CONNECTION,
            "tongyi": ResourceName.EmbeddingModel.TONGYI_CONNECTION,
            "hashing": ResourceName.EmbeddingModel.HASHING_CONNECTION,
        },
        "java": {
            "ollama": ResourceName.EmbeddingModel.Java.OLLAMA_CONNECTION,
            "bedrock": ResourceName.EmbeddingModel.Java.BEDROCK_CONNECTION,
        },
    },
    ResourceType.EMBEDDING_MODEL: {
        "python": {
            "ollama": ResourceName.EmbeddingModel.OLLAMA_SETUP,
            "openai": ResourceName.EmbeddingModel.OPENAI_SETUP,
            "tongyi": ResourceName.EmbeddingModel.TONGYI_SETUP,
            "hashing": ResourceName.EmbeddingModel.HASHING_SETUP,
        },
        "java": {
            "ollama": ResourceName.EmbeddingModel.Java.OLLAMA_SETUP,
            "bedrock": ResourceName.EmbeddingModel.Java.BEDROCK_SETUP,
        },
    },
    ResourceType.VECTOR_STORE: {
        "python": {
            "chroma": ResourceName.VectorStore.CHROMA_VECTOR_STORE,
        },
        "java": {
            "elasticsearch": ResourceName.VectorStore.Java.ELASTICSEARCH_VECTOR_STORE,
        },
    },
}


#: The Python-side wrapper class a ``type: java`` resource of each kind
#: loads as (0.3.1's table); other kinds have no Java form.
JAVA_WRAPPER_CLAZZ: Dict[ResourceType, str] = {
    ResourceType.CHAT_MODEL_CONNECTION: ResourceName.ChatModel.JAVA_WRAPPER_CONNECTION,
    ResourceType.CHAT_MODEL: ResourceName.ChatModel.JAVA_WRAPPER_SETUP,
    ResourceType.EMBEDDING_MODEL_CONNECTION: ResourceName.EmbeddingModel.JAVA_WRAPPER_CONNECTION,
    ResourceType.EMBEDDING_MODEL: ResourceName.EmbeddingModel.JAVA_WRAPPER_SETUP,
    ResourceType.VECTOR_STORE: ResourceName.VectorStore.JAVA_WRAPPER_VECTOR_STORE,
}


class AliasNotAvailable(LookupError):
    """An alias whose class this release cannot provide (one that does not
    import)."""


def is_alias(name: str, resource_type: ResourceType) -> bool:
    """Whether ``name`` is a class alias of ``resource_type``'s section."""
    return name in CLAZZ_ALIASES.get(resource_type, {}).get("python", {})


def resolve_event_type(name: str) -> str:
    """The ``EVENT_TYPE`` string an event alias stands for; any other name (a
    custom event's ``EVENT_TYPE``) unchanged, as 0.3.1 does."""
    return EVENT_ALIASES.get(name, name)


def resolve_clazz(name: str, resource_type: ResourceType, language: str = "python") -> str:
    """The fully qualified class name an alias stands for in the
    ``(resource_type, language)`` bucket (``language`` ``"python"`` or
    ``"java"``; a Java class name for ``"java"``); any other name (a class
    path) unchanged, as 0.3.1 does. The class is not imported here (the
    loader does, and names the alias if it is missing)."""
    return CLAZZ_ALIASES.get(resource_type, {}).get(language, {}).get(name, name)
