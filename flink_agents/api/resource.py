"""Resources: chat models, connections, tools, prompts and sub-agents that
actions look up by name through ``RunnerContext.get_resource``."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Callable, ClassVar, Dict, Type

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SerializationInfo, field_serializer, model_validator
from pydantic_core import PydanticSerializationError

from flink_agents.api.redaction import redact, redacted_for_serialization
from flink_agents.api.resource_context import ResourceContext

__all__ = [
    "Resource",
    "ResourceDescriptor",
    "ResourceName",
    "ResourceType",
    "SerializableResource",
    "get_resource_class",
]


class ResourceType(str, Enum):
    """Kind of a resource; ``get_resource`` looks names up within one kind."""

    CHAT_MODEL = "chat_model"
    CHAT_MODEL_CONNECTION = "chat_model_connection"
    TOOL = "tool"
    EMBEDDING_MODEL = "embedding_model"
    EMBEDDING_MODEL_CONNECTION = "embedding_model_connection"
    VECTOR_STORE = "vector_store"
    PROMPT = "prompt"
    MCP_SERVER = "mcp_server"
    SKILLS = "skills"
    AGENT = "agent"


class Resource(BaseModel, ABC):
    """Base class of resources.

    The runtime gives each resource it builds a ``resource_context``
    (``flink_agents.api.resource_context.ResourceContext``), as Flink Agents
    0.3.1 does, so that a chat model setup can reach its connection, prompt
    and tools by name: ``self.resource_context.get_resource(name, type)``.
    ``get_resource`` is the same lookup as a plain callable (this project's
    earlier spelling; both are bound). Resources are created once per
    operator instance (subtask) and shared by all keys it runs; ``open`` runs
    once after creation, ``close`` at shutdown.

    Secrets (``flink_agents.api.redaction``): a resource's ``repr``/``str``
    show ``***`` for secret-named fields and header values, and its
    validation errors do not echo the input (pydantic would print the
    arguments given, a token among them).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, hide_input_in_errors=True)

    # Constructor arguments that are neither fields nor ``__init__``
    # parameters but that the class accepts (another spelling of a field
    # that a validator consumes, a 0.3.1 setting ignored with a warning):
    # the runtime refuses any other unknown argument of a descriptor, naming
    # it (pydantic would drop a misspelled setting without a word).
    extra_arguments: ClassVar[frozenset] = frozenset()

    resource_context: ResourceContext | None = Field(
        default=None, exclude=True, repr=False
    )
    get_resource: Callable[[str, ResourceType], Any] | None = Field(
        default=None, exclude=True, repr=False
    )

    @classmethod
    @abstractmethod
    def resource_type(cls) -> ResourceType:
        """The kind of this resource."""

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, value if name is None else redact(value, name)

    def open(self) -> None:
        """Acquire what the resource needs (clients, pools). Called once."""

    def close(self) -> None:
        """Release what ``open`` acquired. Called once at shutdown."""

    # The metric group bound by ``RunnerContext.get_resource`` (0.3.1's API).
    _metric_group: Any = PrivateAttr(default=None)

    def set_metric_group(self, metric_group: Any) -> None:
        """Bind the ``MetricGroup`` this resource reports to
        (``flink_agents.api.metric_group``). ``RunnerContext.get_resource``
        binds the calling action's group (or the one it is given), as Flink
        Agents 0.3.1 does. A resource is shared by every key of the operator:
        while runs of several actions use it at once, it reports to the group
        bound last."""
        self._metric_group = metric_group

    @property
    def metric_group(self) -> Any:
        """The bound ``MetricGroup``, or None before any was bound."""
        return self._metric_group


class SerializableResource(Resource, ABC):
    """A resource whose fields are JSON-serializable (prompts, tools' metadata),
    so that a plan can carry it as its class and fields."""

    @model_validator(mode="after")
    def validate_serializable(self) -> "SerializableResource":
        """Check, when the resource is created, that its fields serialize to
        JSON, as Flink Agents 0.3.1 does (fields declared with
        ``exclude=True`` are not part of it).

        Raises:
            ValueError: A field cannot be serialized (pydantic reports it as a
                ``ValidationError``, which is a ``ValueError``); the message
                names the class.
        """
        try:
            self.model_dump_json()
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{type(self).__name__} is a SerializableResource but its fields do not serialize to JSON: {exc}"
            ) from exc
        return self


class ResourceDescriptor(BaseModel):
    """Names a resource class and its constructor arguments, so that a plan can
    be serialized and the resource built where the agent runs.

    Args:
        clazz: The class, or its fully qualified name ("pkg.module.Class").
        arguments: Constructor arguments; ``**kwargs`` merge into them. A
            secret may be given as ``redaction.secret_from_env("NAME")``,
            read where the resource is built.

    Raises:
        ValueError: No class was given.

    Secrets (``flink_agents.api.redaction``): ``repr``/``str`` and every
    serialized form (``model_dump``, ``model_dump_json``, the plan's JSON)
    show ``***`` for secret arguments; the object itself, and so a pickled
    plan, keeps the real values.
    """

    model_config = ConfigDict(hide_input_in_errors=True)

    target_module: str
    target_clazz: str
    arguments: Dict[str, Any] = Field(default_factory=dict)
    # The class itself when one was given: it travels with a pickled plan,
    # so a class defined in the job's main script (not importable by name
    # on a worker) is still found there. Not part of the JSON form.
    _class_object: Any = PrivateAttr(default=None)

    def __init__(
        self,
        /,
        *,
        clazz: str | type | None = None,
        target_module: str | None = None,
        target_clazz: str | None = None,
        arguments: Dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(clazz, type):
            target_module, target_clazz = clazz.__module__, clazz.__qualname__
        elif isinstance(clazz, str):
            target_module, _, target_clazz = clazz.rpartition(".")
        if not target_module or not target_clazz:
            raise ValueError(
                "ResourceDescriptor needs clazz (a class or 'pkg.module.Class')"
            )
        merged = dict(arguments or {})
        merged.update(kwargs)
        super().__init__(
            target_module=target_module, target_clazz=target_clazz, arguments=merged
        )
        if isinstance(clazz, type):
            self._class_object = clazz

    @field_serializer("arguments")
    def _redacted_arguments(self, arguments: Dict[str, Any], info: SerializationInfo) -> Dict[str, Any]:
        # Serialized forms are for people and files: secrets never go there
        # (but under KEEP_SECRETS: equality of plans).
        return redacted_for_serialization(arguments, info.context)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact(value) if name == "arguments" else value

    @property
    def clazz(self) -> Type[Resource]:
        """The resource class: the one given, else imported by name.

        Raises:
            ImportError, AttributeError: The class cannot be found.
        """
        if self._class_object is not None:
            return self._class_object
        obj: Any = importlib.import_module(self.target_module)
        for part in self.target_clazz.split("."):
            obj = getattr(obj, part)
        return obj

    def __eq__(self, other: object) -> bool:
        # Equal when they name the same class with the same arguments, whether
        # the class was given as an object or by name (as in 0.3.1).
        if not isinstance(other, ResourceDescriptor):
            return NotImplemented
        return (self.target_module, self.target_clazz, self.arguments) == (
            other.target_module, other.target_clazz, other.arguments
        )

    __hash__ = None  # type: ignore[assignment]  # arguments are mutable


def get_resource_class(module_path: str, class_name: str) -> Type[Resource]:
    """The class ``class_name`` of module ``module_path``, as Flink Agents
    0.3.1's ``get_resource_class`` finds it (``class_name`` may be dotted for
    a nested class).

    Args:
        module_path: An importable module, e.g. ``"my_pkg.models"``.
        class_name: A class of that module, e.g. ``"MyChatModelSetup"``.

    Raises:
        ValueError: ``module_path`` or ``class_name`` is empty.
        ModuleNotFoundError: The module cannot be imported.
        AttributeError: The module has no such class (the message names both).
        TypeError: The name does not refer to a class.
    """
    if not module_path or not class_name:
        raise ValueError(
            f"get_resource_class needs module_path and class_name, got {module_path!r} and {class_name!r}"
        )
    obj: Any = importlib.import_module(module_path)
    for part in class_name.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"module {module_path!r} has no class {class_name!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise TypeError(f"{module_path}.{class_name} is a {type(obj).__name__}, not a class")
    return obj


_JAVA_CHAT = "org.apache.flink.agents.integrations.chatmodels"
_JAVA_EMBED = "org.apache.flink.agents.integrations.embeddingmodels"
_JAVA_VS = "org.apache.flink.agents.integrations.vectorstores"


class ResourceName:
    """Fully qualified class names of the built-in resource implementations, for
    ``ResourceDescriptor(clazz=...)``."""

    class ChatModel:
        """Chat model connections and setups."""

        OPENAI_COMPLETIONS_CONNECTION = "flink_agents.integrations.chat_models.openai.openai_chat_model.OpenAIChatModelConnection"
        OPENAI_COMPLETIONS_SETUP = "flink_agents.integrations.chat_models.openai.openai_chat_model.OpenAIChatModelSetup"
        LOCAL_CONNECTION = "flink_agents.integrations.chat_models.local.local_chat_model.LocalChatModelConnection"
        LOCAL_SETUP = "flink_agents.integrations.chat_models.local.local_chat_model.LocalChatModelSetup"
        ANTHROPIC_CONNECTION = "flink_agents.integrations.chat_models.anthropic.anthropic_chat_model.AnthropicChatModelConnection"
        ANTHROPIC_SETUP = "flink_agents.integrations.chat_models.anthropic.anthropic_chat_model.AnthropicChatModelSetup"
        AZURE_OPENAI_CONNECTION = "flink_agents.integrations.chat_models.azure.azure_openai_chat_model.AzureOpenAIChatModelConnection"
        AZURE_OPENAI_SETUP = "flink_agents.integrations.chat_models.azure.azure_openai_chat_model.AzureOpenAIChatModelSetup"
        OLLAMA_CONNECTION = "flink_agents.integrations.chat_models.ollama_chat_model.OllamaChatModelConnection"
        OLLAMA_SETUP = "flink_agents.integrations.chat_models.ollama_chat_model.OllamaChatModelSetup"
        TONGYI_CONNECTION = "flink_agents.integrations.chat_models.tongyi_chat_model.TongyiChatModelConnection"
        TONGYI_SETUP = "flink_agents.integrations.chat_models.tongyi_chat_model.TongyiChatModelSetup"

        # 0.3.1's Python-side wrappers of Java resources, and (``Java``) the
        # Java classes they name: a plan using one does not compile here
        # (no JVM; docs/compatibility.md).
        JAVA_WRAPPER_CONNECTION = "flink_agents.api.chat_models.java_chat_model.JavaChatModelConnection"
        JAVA_WRAPPER_SETUP = "flink_agents.api.chat_models.java_chat_model.JavaChatModelSetup"

        class Java:
            """Java chat model classes (0.3.1's names)."""

            ANTHROPIC_CONNECTION = f"{_JAVA_CHAT}.anthropic.AnthropicChatModelConnection"
            ANTHROPIC_SETUP = f"{_JAVA_CHAT}.anthropic.AnthropicChatModelSetup"
            AZURE_CONNECTION = f"{_JAVA_CHAT}.azureai.AzureAIChatModelConnection"
            AZURE_SETUP = f"{_JAVA_CHAT}.azureai.AzureAIChatModelSetup"
            BEDROCK_CONNECTION = f"{_JAVA_CHAT}.bedrock.BedrockChatModelConnection"
            BEDROCK_SETUP = f"{_JAVA_CHAT}.bedrock.BedrockChatModelSetup"
            OLLAMA_CONNECTION = f"{_JAVA_CHAT}.ollama.OllamaChatModelConnection"
            OLLAMA_SETUP = f"{_JAVA_CHAT}.ollama.OllamaChatModelSetup"
            OPENAI_COMPLETIONS_CONNECTION = f"{_JAVA_CHAT}.openai.OpenAICompletionsConnection"
            OPENAI_COMPLETIONS_SETUP = f"{_JAVA_CHAT}.openai.OpenAICompletionsSetup"
            OPENAI_RESPONSES_CONNECTION = f"{_JAVA_CHAT}.openai.OpenAIResponsesModelConnection"
            OPENAI_RESPONSES_SETUP = f"{_JAVA_CHAT}.openai.OpenAIResponsesModelSetup"
            AZURE_OPENAI_CONNECTION = f"{_JAVA_CHAT}.openai.AzureOpenAIChatModelConnection"
            AZURE_OPENAI_SETUP = f"{_JAVA_CHAT}.openai.AzureOpenAIChatModelSetup"

    class EmbeddingModel:
        """Embedding model connections and setups."""

        OLLAMA_CONNECTION = "flink_agents.integrations.embedding_models.local.ollama_embedding_model.OllamaEmbeddingModelConnection"
        OLLAMA_SETUP = "flink_agents.integrations.embedding_models.local.ollama_embedding_model.OllamaEmbeddingModelSetup"
        OPENAI_CONNECTION = "flink_agents.integrations.embedding_models.openai_embedding_model.OpenAIEmbeddingModelConnection"
        OPENAI_SETUP = "flink_agents.integrations.embedding_models.openai_embedding_model.OpenAIEmbeddingModelSetup"
        TONGYI_CONNECTION = "flink_agents.integrations.embedding_models.tongyi_embedding_model.TongyiEmbeddingModelConnection"
        TONGYI_SETUP = "flink_agents.integrations.embedding_models.tongyi_embedding_model.TongyiEmbeddingModelSetup"
        # Offline, deterministic, lexical (word overlap, not meaning): tests and examples.
        HASHING_CONNECTION = "flink_agents.integrations.embedding_models.local.hashing_embedding_model.HashingEmbeddingModelConnection"
        HASHING_SETUP = "flink_agents.integrations.embedding_models.local.hashing_embedding_model.HashingEmbeddingModelSetup"

        JAVA_WRAPPER_CONNECTION = "flink_agents.api.embedding_models.java_embedding_model.JavaEmbeddingModelConnection"
        JAVA_WRAPPER_SETUP = "flink_agents.api.embedding_models.java_embedding_model.JavaEmbeddingModelSetup"

        class Java:
            """Java embedding model classes (0.3.1's names)."""

            OLLAMA_CONNECTION = f"{_JAVA_EMBED}.ollama.OllamaEmbeddingModelConnection"
            OLLAMA_SETUP = f"{_JAVA_EMBED}.ollama.OllamaEmbeddingModelSetup"
            BEDROCK_CONNECTION = f"{_JAVA_EMBED}.bedrock.BedrockEmbeddingModelConnection"
            BEDROCK_SETUP = f"{_JAVA_EMBED}.bedrock.BedrockEmbeddingModelSetup"

    class VectorStore:
        """Vector stores."""

        CHROMA_VECTOR_STORE = "flink_agents.integrations.vector_stores.chroma.chroma_vector_store.ChromaVectorStore"
        # Mem0's vector store providers (pgvector, Qdrant, Milvus, ...): the mem0 extra.
        MEM0_VECTOR_STORE = "flink_agents.integrations.vector_stores.mem0.mem0_vector_store.Mem0VectorStore"

        JAVA_WRAPPER_VECTOR_STORE = "flink_agents.api.vector_stores.java_vector_store.JavaVectorStore"
        JAVA_WRAPPER_COLLECTION_MANAGEABLE_VECTOR_STORE = (
            "flink_agents.api.vector_stores.java_vector_store.JavaCollectionManageableVectorStore"
        )

        class Java:
            """Java vector store classes (0.3.1's names)."""

            ELASTICSEARCH_VECTOR_STORE = f"{_JAVA_VS}.elasticsearch.ElasticsearchVectorStore"
            OPENSEARCH_VECTOR_STORE = f"{_JAVA_VS}.opensearch.OpenSearchVectorStore"
            S3_VECTORS_VECTOR_STORE = f"{_JAVA_VS}.s3vectors.S3VectorsVectorStore"
            MILVUS_VECTOR_STORE = f"{_JAVA_VS}.milvus.MilvusVectorStore"

    # MCP servers (tools and prompts from the Model Context Protocol)
    MCP_SERVER = "flink_agents.integrations.mcp.mcp.MCPServer"
