"""The Flink Agents 0.3 import paths (DESIGN.md's module table) stay put.

User code written against Flink Agents 0.3 imports these names from these
modules; moving one breaks that code, so each is pinned here.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

EXPORTS = {
    "flink_agents.api.agents.agent": ["Agent"],
    "flink_agents.api.decorators": [
        "action",
        "tool",
        "prompt",
        "chat_model_connection",
        "chat_model_setup",
    ],
    "flink_agents.api.events.event": ["Event", "InputEvent", "OutputEvent"],
    "flink_agents.api.events.chat_event": ["ChatRequestEvent", "ChatResponseEvent"],
    "flink_agents.api.events.tool_event": ["ToolRequestEvent", "ToolResponseEvent"],
    "flink_agents.api.runner_context": ["RunnerContext"],
    "flink_agents.api.memory_object": ["MemoryObject"],
    "flink_agents.api.memory_reference": ["MemoryRef"],
    "flink_agents.api.chat_models.chat_model": ["BaseChatModelConnection", "BaseChatModelSetup"],
    "flink_agents.api.resource": ["ResourceType", "ResourceDescriptor", "ResourceName"],
    "flink_agents.api.chat_message": ["ChatMessage", "MessageRole"],
    "flink_agents.api.prompts.prompt": ["Prompt"],
    "flink_agents.api.tools.tool": ["Tool"],
    "flink_agents.api.execution_environment": ["AgentsExecutionEnvironment"],
    "flink_agents.api.configuration": ["ConfigOption", "Configuration", "ReadableConfiguration", "WritableConfiguration"],
    "flink_agents.api.core_options": [
        "AgentConfigOptions",
        "AgentExecutionOptions",
        "ErrorHandlingStrategy",
        "EventLogLevel",
        "LoggerType",
        "ShortTermMemoryTtlUpdate",
        "ShortTermMemoryTtlVisibility",
    ],
    "flink_agents.plan.configuration": ["AgentConfiguration"],
}

# Members user code calls on the exported classes.
MEMBERS = {
    ("flink_agents.api.agents.agent", "Agent"): ["add_action", "add_resource"],
    ("flink_agents.api.events.event", "Event"): ["EVENT_TYPE", "from_event"],
    ("flink_agents.api.events.event", "InputEvent"): ["EVENT_TYPE", "from_event"],
    ("flink_agents.api.events.event", "OutputEvent"): ["EVENT_TYPE", "from_event"],
    ("flink_agents.api.runner_context", "RunnerContext"): [
        "key",
        "send_event",
        "short_term_memory",
        "sensory_memory",
        "get_resource",
        "durable_execute",
        "durable_execute_async",
        "config",
        "action_config",
    ],
    ("flink_agents.api.memory_object", "MemoryObject"): [
        "get",
        "set",
        "new_object",
        "is_exist",
        "get_field_names",
        "get_fields",
    ],
    ("flink_agents.api.chat_models.chat_model", "BaseChatModelConnection"): ["chat"],
    ("flink_agents.api.prompts.prompt", "Prompt"): ["from_text", "from_messages", "format_string", "format_messages"],
    ("flink_agents.api.execution_environment", "AgentsExecutionEnvironment"): [
        "get_execution_environment",
        "get_config",
        "from_list",
        "from_datastream",
        "from_table",  # Flink runner only: tests/e2e/test_table_api_e2e.py
        "execute",
    ],
}

PAIRS = [(module, name) for module, names in EXPORTS.items() for name in names]


@pytest.mark.parametrize("module, name", PAIRS, ids=[f"{m}:{n}" for m, n in PAIRS])
def test_name_is_importable_from_its_flink_agents_path(module, name):
    mod = importlib.import_module(module)

    assert hasattr(mod, name), f"{module} lost {name}"
    assert name in getattr(mod, "__all__", ()), f"{name} missing from {module}.__all__"


@pytest.mark.parametrize("where, members", MEMBERS.items(), ids=[f"{m}:{n}" for m, n in MEMBERS])
def test_exported_class_keeps_its_members(where, members):
    cls = getattr(importlib.import_module(where[0]), where[1])

    assert [m for m in members if not hasattr(cls, m)] == []


def test_event_types_are_distinct_strings():
    from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
    from flink_agents.api.events.event import Event, InputEvent, OutputEvent
    from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent

    classes = [Event, InputEvent, OutputEvent, ChatRequestEvent, ChatResponseEvent, ToolRequestEvent, ToolResponseEvent]
    types = [c.EVENT_TYPE for c in classes]

    assert all(isinstance(t, str) for t in types)
    assert len(set(types)) == len(types)


def test_resource_type_has_agent_and_chat_model_setup_fields():
    from flink_agents.api.chat_models.chat_model import BaseChatModelSetup
    from flink_agents.api.resource import ResourceType

    assert ResourceType.AGENT.value == "agent"
    assert {"connection", "model", "prompt", "tools"} <= set(BaseChatModelSetup.model_fields)


def test_durable_execute_async_is_a_coroutine_and_memory_get_takes_a_path():
    from flink_agents.api.memory_object import MemoryObject
    from flink_agents.api.runner_context import RunnerContext

    # Returns 0.3.1's AsyncExecutionResult: awaitable, and a coroutine (gather, create_task).
    from collections.abc import Coroutine

    from flink_agents.api.runner_context import AsyncExecutionResult

    assert inspect.signature(RunnerContext.durable_execute_async).return_annotation in (AsyncExecutionResult, "AsyncExecutionResult")
    assert issubclass(AsyncExecutionResult, Coroutine)
    assert "path_or_ref" in inspect.signature(MemoryObject.get).parameters  # 0.3.1's name


def test_without_a_flink_env_the_local_runner_is_returned():
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    env = AgentsExecutionEnvironment.get_execution_environment()

    assert isinstance(env, AgentsExecutionEnvironment)
    assert env.get_config() == {}


def _both_runners():
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    local = AgentsExecutionEnvironment.get_execution_environment()
    # The Flink runner's constructor only keeps the StreamExecutionEnvironment:
    # a stand-in avoids starting a JVM (if it starts to use it, this fails loudly).
    flink = AgentsExecutionEnvironment.get_execution_environment(object())
    assert type(local).__name__ == "LocalExecutionEnvironment"
    assert type(flink).__name__ == "FlinkExecutionEnvironment"
    return {"local": local, "flink": flink}


def test_from_table_on_the_local_runner_names_the_flink_runner():
    """``from_table`` keeps its 0.3 name; the local runner has no tables and
    says which runner offers it, not a builder that silently does nothing."""
    env = _both_runners()["local"]

    with pytest.raises(NotImplementedError, match=r"from_table\(\) is offered by the Flink runner only"):
        env.from_table(object(), key_selector=lambda row: row)


def test_from_table_on_the_flink_runner_checks_its_input_before_any_table_environment():
    """The Flink runner implements ``from_table``: a wrong input is a
    TypeError naming the parameter (checked before a table environment is
    created from the stand-in env, which would fail otherwise)."""
    with pytest.raises(TypeError, match=r"from_table: input must be a pyflink.table.Table, not object"):
        _both_runners()["flink"].from_table(object(), key_selector=lambda row: row)
