"""The YAML agent file format, as pydantic models.

The schema is Flink Agents 0.3.1's (``flink_agents.api.yaml.specs`` there):
a document holds ``agents:`` and, beside it, file-level (shared) resource
sections and ``actions:``. Each agent holds its own resource sections and
``actions:`` (inline maps, or the name of a shared action). Unknown keys are
refused everywhere except in resource-descriptor entries, whose extra keys
are the resource's constructor arguments.

``export()`` (also ``python -m flink_agents.api.yaml.specs``) prints the
JSON Schema, for editors' YAML language servers.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from flink_agents.api.chat_message import MessageRole

__all__ = [
    "ActionSpec",
    "AgentSpec",
    "DescriptorSpec",
    "Language",
    "MessageRole",
    "PackageSkillSpec",
    "PromptMessage",
    "PromptSpec",
    "SkillsSpec",
    "ToolSpec",
    "YamlAgentsDocument",
    "export",
]

Language = Literal["python", "java"]
"""Implementation language of a declared resource, action or tool (0.3.1's
values; this runtime runs ``python`` only and refuses ``java`` by key)."""

# Tags of the action-list union; the loader drops them from error locations.
ACTION_MAP_TAG = "action map"
ACTION_REF_TAG = "shared action name"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DescriptorSpec(BaseModel):
    """A resource built from a ``ResourceDescriptor`` (chat model connections
    and setups, embedding models, vector stores, MCP servers).

    ``clazz`` is an alias (``flink_agents.api.yaml.aliases``) or a fully
    qualified class name; every other key is a constructor argument of that
    class (e.g. ``connection``, ``model``, ``prompt``, ``tools``, ``base_url``).
    """

    model_config = ConfigDict(extra="allow")

    name: str
    clazz: str
    type: Optional[Language] = None


class PromptMessage(_Strict):
    """One message of a ``messages`` prompt; ``role`` defaults to ``user``."""

    role: MessageRole = MessageRole.USER
    content: str


class PromptSpec(_Strict):
    """A prompt: exactly one of a ``text`` template or a list of ``messages``
    (``Prompt.from_text`` / ``Prompt.from_messages``)."""

    name: str
    text: Optional[str] = None
    messages: Optional[List[PromptMessage]] = None

    @model_validator(mode="after")
    def _one_of_text_or_messages(self) -> "PromptSpec":
        if bool(self.text) == bool(self.messages):
            raise ValueError("a prompt needs exactly one non-empty 'text' or 'messages'")
        return self


class ToolSpec(_Strict):
    """A function tool: ``function`` is ``module:qualname`` (0.3.1's form) or
    a dotted path ``module.qualname``. ``parameter_types`` is for Java tools."""

    name: str
    function: Optional[str] = None
    type: Optional[Language] = None
    parameter_types: Optional[List[str]] = None
    # Flink Agents HEAD: {parameter: {"source": config|sensory_memory|short_term_memory, "key": ...}}
    injected_args: Optional[Dict[str, Dict[str, Any]]] = None


class PackageSkillSpec(_Strict):
    """A skill source inside an installed Python package."""

    package: str
    resource: str


class SkillsSpec(_Strict):
    """Skills from local paths, URLs, the Java classpath or Python packages;
    at least one source."""

    name: str
    paths: List[str] = Field(default_factory=list)
    urls: List[str] = Field(default_factory=list)
    classpath: List[str] = Field(default_factory=list)
    package: List[PackageSkillSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_source_at_least(self) -> "SkillsSpec":
        if not (self.paths or self.urls or self.classpath or self.package):
            raise ValueError("skills need at least one of paths, urls, classpath, package")
        return self


class ActionSpec(_Strict):
    """An action: the function ``(event, ctx) -> None`` it runs, what
    triggers it, and an optional ``config`` map read through
    ``ctx.action_config``.

    What triggers it is given once, as ``listen_to`` (Flink Agents 0.3.1:
    event types or aliases, ``input``, ``chat_response``, ...) or as
    ``trigger_conditions`` (HEAD: the same, or condition expressions such as
    ``type == EventType.InputEvent && score > 5``, combined with OR).
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"oneOf": [{"required": ["listen_to"]}, {"required": ["trigger_conditions"]}]},
    )

    name: str
    function: Optional[str] = None
    listen_to: Optional[List[str]] = Field(default=None, min_length=1)
    trigger_conditions: Optional[List[Annotated[str, Field(pattern=r"\S")]]] = Field(default=None, min_length=1)
    config: Optional[Dict[str, Any]] = None
    type: Optional[Language] = None

    @model_validator(mode="after")
    def _one_trigger_list(self) -> "ActionSpec":
        if (self.listen_to is None) == (self.trigger_conditions is None):
            raise ValueError(
                f"action {self.name!r}: give exactly one of listen_to (0.3.1) and trigger_conditions (HEAD)"
            )
        return self

    @property
    def triggers(self) -> List[str]:
        """``trigger_conditions`` or ``listen_to``, whichever is given."""
        return list(self.trigger_conditions if self.trigger_conditions is not None else self.listen_to or [])

    @property
    def triggers_field(self) -> str:
        """The name of the field ``triggers`` come from (for error locations)."""
        return "trigger_conditions" if self.trigger_conditions is not None else "listen_to"


def _action_tag(value: Any) -> str:
    return ACTION_REF_TAG if isinstance(value, str) else ACTION_MAP_TAG


ActionItem = Annotated[
    Union[Annotated[ActionSpec, Tag(ACTION_MAP_TAG)], Annotated[str, Tag(ACTION_REF_TAG)]],
    Discriminator(_action_tag),
]


class _Sections(_Strict):
    prompts: List[PromptSpec] = Field(default_factory=list)
    tools: List[ToolSpec] = Field(default_factory=list)
    skills: List[SkillsSpec] = Field(default_factory=list)
    chat_model_connections: List[DescriptorSpec] = Field(default_factory=list)
    chat_model_setups: List[DescriptorSpec] = Field(default_factory=list)
    embedding_model_connections: List[DescriptorSpec] = Field(default_factory=list)
    embedding_model_setups: List[DescriptorSpec] = Field(default_factory=list)
    vector_stores: List[DescriptorSpec] = Field(default_factory=list)
    mcp_servers: List[DescriptorSpec] = Field(default_factory=list)


class AgentSpec(_Sections):
    """One entry of ``agents:``: its name, description, resources and actions."""

    name: str
    description: Optional[str] = None
    actions: List[ActionItem] = Field(default_factory=list)


class YamlAgentsDocument(_Sections):
    """A whole file: ``agents:`` (optional) and the shared sections beside it.
    Shared resources are registered on the environment; shared actions are
    used by agents that name them in their ``actions:`` list."""

    agents: List[AgentSpec] = Field(default_factory=list)
    actions: List[ActionSpec] = Field(default_factory=list)


DESCRIPTOR_SECTIONS = (
    "chat_model_connections",
    "chat_model_setups",
    "embedding_model_connections",
    "embedding_model_setups",
    "vector_stores",
    "mcp_servers",
)


def export() -> str:
    """The JSON Schema of the file format (pretty-printed JSON text)."""
    return json.dumps(YamlAgentsDocument.model_json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(export())
