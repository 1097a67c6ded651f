"""Resources: chat models, connections, tools, prompts and sub-agents that
actions look up by name through ``RunnerContext.get_resource``."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Callable, Dict, Type

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

__all__ = [
    "Resource",
    "ResourceDescriptor",
    "ResourceName",
    "ResourceType",
    "SerializableResource",
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
    AGENT = "agent"


class Resource(BaseModel, ABC):
    """Base class of resources.

    ``get_resource`` is bound by the runtime when the resource is created, so a
    chat model setup can resolve its connection, prompt and tools by name.
    Resources are created once per operator instance (subtask) and shared by
    all keys it runs; ``open`` runs once after creation, ``close`` at shutdown.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    get_resource: Callable[[str, ResourceType], Any] | None = Field(
        default=None, exclude=True, repr=False
    )

    @classmethod
    @abstractmethod
    def resource_type(cls) -> ResourceType:
        """The kind of this resource."""

    def open(self) -> None:
        """Acquire what the resource needs (clients, pools). Called once."""

    def close(self) -> None:
        """Release what ``open`` acquired. Called once at shutdown."""


class SerializableResource(Resource, ABC):
    """A resource whose fields are JSON-serializable (prompts, tools' metadata)."""


class ResourceDescriptor(BaseModel):
    """Names a resource class and its constructor arguments, so that a plan can
    be serialized and the resource built where the agent runs.

    Args:
        clazz: The class, or its fully qualified name ("pkg.module.Class").
        arguments: Constructor arguments; ``**kwargs`` merge into them.

    Raises:
        ValueError: No class was given.
    """

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


class ResourceName:
    """Fully qualified class names of the built-in resource implementations, for
    ``ResourceDescriptor(clazz=...)``."""

    class ChatModel:
        """Chat model connections and setups."""

        OPENAI_COMPLETIONS_CONNECTION = "flink_agents.integrations.chat_models.openai.openai_chat_model.OpenAIChatModelConnection"
        OPENAI_COMPLETIONS_SETUP = "flink_agents.integrations.chat_models.openai.openai_chat_model.OpenAIChatModelSetup"
        LOCAL_CONNECTION = "flink_agents.integrations.chat_models.local.local_chat_model.LocalChatModelConnection"
        LOCAL_SETUP = "flink_agents.integrations.chat_models.local.local_chat_model.LocalChatModelSetup"
