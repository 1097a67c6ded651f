"""0.3.1's Java interop names: they import and build as in 0.3.1, and an agent
that uses a Java action, tool or resource fails when its plan is compiled,
naming it (this runtime is pure Python: docs/compatibility.md, "No Java")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import pytest
from pydantic import BaseModel, Field

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_models.java_chat_model import JavaChatModelConnection, JavaChatModelSetup
from flink_agents.api.decorators import ActionDeclarationError, action, java_resource
from flink_agents.api.embedding_models.java_embedding_model import JavaEmbeddingModelSetup
from flink_agents.api.events.event import Event, InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.function import ACTION_PARAMETER_TYPES, JavaFunction, PythonFunction
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.tools.function_tool import FunctionTool
from flink_agents.api.tools.utils import (
    create_java_tool_schema_str_from_model,
    create_model_from_java_tool_schema_str,
)
from flink_agents.api.vector_stores.java_vector_store import JavaCollectionManageableVectorStore, JavaVectorStore
from flink_agents.api.yaml.aliases import JAVA_WRAPPER_CLAZZ, resolve_clazz
from flink_agents.api.yaml.loader import build_agents
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.plan.errors import PlanError

NO_JVM = "pure Python and has no JVM-side resources"


def echo(event: Event, ctx: RunnerContext) -> None:
    ctx.send_event(OutputEvent(output=f"echo {InputEvent.from_event(event).input}"))


def shout(event: Event, ctx: RunnerContext) -> None:
    ctx.send_event(OutputEvent(output=str(InputEvent.from_event(event).input).upper()))


def _run(agent: Agent, records: List[Any]) -> List[Any]:
    env = AgentsExecutionEnvironment.get_execution_environment()
    outputs = env.from_list(records).apply(agent).to_list()
    env.execute()
    return [value for entry in outputs for value in entry.values()]


# --- descriptors and names -------------------------------------------------------


def test_java_function_for_action_fills_the_action_signature_and_dumps_as_031() -> None:
    jf = JavaFunction.for_action("com.example.Handlers", "handle")
    assert jf.parameter_types == list(ACTION_PARAMETER_TYPES) == [
        "org.apache.flink.agents.api.Event",
        "org.apache.flink.agents.api.context.RunnerContext",
    ]
    assert jf.model_dump() == {
        "func_type": "JavaFunction",
        "qualname": "com.example.Handlers",
        "method_name": "handle",
        "parameter_types": list(ACTION_PARAMETER_TYPES),
    }


def test_java_resource_names_and_wrappers_are_031s() -> None:
    assert ResourceName.ChatModel.Java.OLLAMA_SETUP == (
        "org.apache.flink.agents.integrations.chatmodels.ollama.OllamaChatModelSetup"
    )
    assert ResourceName.VectorStore.Java.ELASTICSEARCH_VECTOR_STORE.startswith("org.apache.flink.agents.")
    wrappers = {
        ResourceName.ChatModel.JAVA_WRAPPER_CONNECTION: JavaChatModelConnection,
        ResourceName.ChatModel.JAVA_WRAPPER_SETUP: JavaChatModelSetup,
        ResourceName.EmbeddingModel.JAVA_WRAPPER_SETUP: JavaEmbeddingModelSetup,
        ResourceName.VectorStore.JAVA_WRAPPER_VECTOR_STORE: JavaVectorStore,
        ResourceName.VectorStore.JAVA_WRAPPER_COLLECTION_MANAGEABLE_VECTOR_STORE: JavaCollectionManageableVectorStore,
    }
    for path, cls in wrappers.items():
        assert ResourceDescriptor(clazz=path).clazz is cls
        assert cls._is_java_resource is True
    assert set(JAVA_WRAPPER_CLAZZ) == {
        ResourceType.CHAT_MODEL_CONNECTION, ResourceType.CHAT_MODEL, ResourceType.EMBEDDING_MODEL_CONNECTION,
        ResourceType.EMBEDDING_MODEL, ResourceType.VECTOR_STORE,
    }
    assert resolve_clazz("bedrock", ResourceType.CHAT_MODEL, "java") == ResourceName.ChatModel.Java.BEDROCK_SETUP
    assert resolve_clazz("ollama", ResourceType.CHAT_MODEL) == ResourceName.ChatModel.OLLAMA_SETUP


def test_action_decorator_checks_its_target_and_keeps_031s_errors() -> None:
    with pytest.raises(TypeError, match="Function descriptor"):
        action(InputEvent, target="pkg.mod:fn")
    with pytest.raises(ValueError, match="method_name"):
        action(InputEvent, target=JavaFunction(qualname="a.B", method_name="", parameter_types=[]))(echo)
    # 0.3.1 raises AssertionError there; ours is also a TypeError.
    with pytest.raises(AssertionError):
        action()
    with pytest.raises(ActionDeclarationError, match="not 42"):
        action(42)


# --- a Java action, tool or resource fails the plan ------------------------------


class JavaActionAgent(Agent):
    @action(InputEvent, target=JavaFunction.for_action("com.example.Handlers", "handle"))
    @staticmethod
    def on_input(event: Event, ctx: RunnerContext) -> None:
        raise NotImplementedError("runs in Java in 0.3.1")


def test_a_java_action_fails_the_plan_naming_it() -> None:
    with pytest.raises(PlanError, match=rf"action 'on_input' of JavaActionAgent is the Java method "
                                        rf"com\.example\.Handlers#handle\(.*\): this runtime is {NO_JVM}"):
        AgentPlan.from_agent(JavaActionAgent())

    agent = Agent()
    agent.add_action("java_act", [InputEvent.EVENT_TYPE], JavaFunction.for_action("com.example.X", "run"))
    assert agent.actions["java_act"][1] == JavaFunction.for_action("com.example.X", "run")
    env = AgentsExecutionEnvironment.get_execution_environment()
    with pytest.raises(PlanError, match=r"action 'java_act' of Agent is the Java method com\.example\.X#run"):
        env.from_list([{"key": "k", "value": 1}]).apply(agent).to_list()
        env.execute()


@pytest.mark.parametrize("declared", [
    ResourceDescriptor(clazz=ResourceName.ChatModel.JAVA_WRAPPER_SETUP,
                       java_clazz=ResourceName.ChatModel.Java.OLLAMA_SETUP, connection="c"),
    ResourceDescriptor(clazz=JavaChatModelSetup, java_clazz=ResourceName.ChatModel.Java.OLLAMA_SETUP),
], ids=["by name", "by class"])
def test_a_java_resource_fails_the_plan_naming_it_and_its_java_class(declared: ResourceDescriptor) -> None:
    agent = Agent()
    agent.add_action("echo", [InputEvent], echo)
    agent.add_resource("chat", ResourceType.CHAT_MODEL, declared)
    with pytest.raises(PlanError, match=rf"chat_model resource 'chat' of Agent is the Java resource "
                                        rf"{ResourceName.ChatModel.Java.OLLAMA_SETUP}: this runtime is {NO_JVM}"):
        AgentPlan.from_agent(agent)


def test_a_user_class_marked_java_resource_fails_the_plan() -> None:
    @java_resource
    class MyJavaStore(JavaVectorStore):
        pass

    agent = Agent()
    agent.add_action("echo", [InputEvent], echo)
    agent.add_resource("store", ResourceType.VECTOR_STORE, ResourceDescriptor(clazz=MyJavaStore))
    with pytest.raises(PlanError, match=r"vector_store resource 'store' of Agent is the Java resource .*MyJavaStore"):
        AgentPlan.from_agent(agent)


def test_yaml_type_java_loads_as_031_and_each_use_fails_the_plan(tmp_path: Path) -> None:
    head = "agents:\n  - name: a\n"
    echo_action = "    actions:\n      - name: echo\n        function: tests.compat.test_java_interop:echo\n" \
                  "        listen_to: [input]\n"
    cases = {
        "connection": (
            "    chat_model_connections:\n      - name: jc\n        type: java\n        clazz: ollama\n"
            "        endpoint: http://localhost:11434\n" + echo_action,
            r"chat_model_connection resource 'jc' of a is the Java resource "
            r"org\.apache\.flink\.agents\.integrations\.chatmodels\.ollama\.OllamaChatModelConnection",
        ),
        "tool": (
            "    tools:\n      - name: add\n        type: java\n        function: com.example.Tools:add\n"
            "        parameter_types: [int, int]\n" + echo_action,
            r"tool resource 'add' of a is the Java method com\.example\.Tools#add\(int, int\)",
        ),
        "action": (
            "    actions:\n      - name: j\n        type: java\n        function: com.example.MyAgent:handle\n"
            "        listen_to: [input]\n",
            r"action 'j' of a is the Java method com\.example\.MyAgent#handle",
        ),
    }
    for case, (body, message) in cases.items():
        path = tmp_path / f"{case}.yaml"
        path.write_text(head + body)
        agents, _, _ = build_agents(path)
        with pytest.raises(PlanError, match=message + ".*" + NO_JVM):
            AgentPlan.from_agent(agents["a"])

    agents, _, _ = build_agents(tmp_path / "connection.yaml")
    connection = agents["a"].resources[ResourceType.CHAT_MODEL_CONNECTION]["jc"]
    assert connection.target_clazz == "JavaChatModelConnection"
    assert connection.arguments == {"endpoint": "http://localhost:11434",
                                    "java_clazz": ResourceName.ChatModel.Java.OLLAMA_CONNECTION}
    tool = build_agents(tmp_path / "tool.yaml")[0]["a"].resources[ResourceType.TOOL]["add"]
    assert isinstance(tool, FunctionTool) and tool.func.parameter_types == ["int", "int"]
    with pytest.raises(RuntimeError, match="cannot run Java tools"):
        tool.call(1, 2)


# --- Python descriptors run ------------------------------------------------------


class TargetAgent(Agent):
    @action(InputEvent, target=PythonFunction(module=__name__, qualname="shout"))
    @staticmethod
    def on_input(event: Event, ctx: RunnerContext) -> None:
        raise NotImplementedError("the target runs instead")


def test_a_python_target_and_an_added_function_run_as_their_descriptors() -> None:
    assert _run(TargetAgent(), [{"key": "k", "value": "hi"}]) == ["HI"]

    agent = Agent()
    agent.add_action("echo", [InputEvent], echo)
    events, stored, config = agent.actions["echo"]
    assert stored == PythonFunction(module=__name__, qualname="echo") and config is None
    assert _run(agent, [{"key": "k", "value": "hi"}]) == ["echo hi"]


# --- Java tool schemas -----------------------------------------------------------


class Order(BaseModel):
    sku: str = Field(description="the article")
    count: int = Field(description="how many")
    note: Optional[str] = None
    lines: List[int] = Field(default_factory=list)


def test_java_tool_schemas_round_trip_names_types_descriptions() -> None:
    schema = json.loads(create_java_tool_schema_str_from_model(Order))
    assert schema == {
        "properties": {
            "sku": {"type": "string", "description": "the article"},
            "count": {"type": "integer", "description": "how many"},
            "note": {"type": "string", "description": "Parameter: note"},
            "lines": {"type": "array", "description": "Parameter: lines"},
        },
        "required": ["sku", "count"],
    }
    rebuilt = create_model_from_java_tool_schema_str("Order", json.dumps(schema)).model_fields
    assert {n: (f.annotation, f.description) for n, f in rebuilt.items()} == {
        "sku": (str, "the article"), "count": (int, "how many"),
        "note": (str, "Parameter: note"), "lines": (list, "Parameter: lines"),
    }
    with pytest.raises(ValueError, match="property 'when' has type 'date'"):
        create_model_from_java_tool_schema_str("J", json.dumps({"properties": {"when": {"type": "date"}}}))

    class Odd(BaseModel):
        either: int | str

    with pytest.raises(TypeError, match="Odd.either"):
        create_java_tool_schema_str_from_model(Odd)
