"""``ReActAgent`` on the local runner, over the real ``openai`` SDK against
the scripted OpenAI server: inputs to messages, the schema instruction, the
tool loop on the built-in chat action, structured output, the step bound,
and 0.3.1's quickstart usage unchanged."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
from pydantic import BaseModel
from pyflink.common import Row

from flink_agents.api.agents.react_agent import ReActAgent, ReActStepLimitReached
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.tools.tool import Tool
from flink_agents.runtime.errors import ActionFailed
from tests.support.scripted_ollama_server import OllamaScriptedServer

TOOL_RUNS: List[tuple] = []


@pytest.fixture(autouse=True)
def _clear_tool_runs():
    TOOL_RUNS.clear()
    yield
    TOOL_RUNS.clear()


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    TOOL_RUNS.append(("add", a, b))
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    TOOL_RUNS.append(("multiply", a, b))
    return a * b


class Calculation(BaseModel):
    result: int
    steps: List[str]


class Operands(BaseModel):
    a: int
    b: int
    c: int


SYSTEM = 'Compute with the tools. An example of output is {"result": 30, "steps": ["add", "multiply"]}.'
CALC_PROMPT = Prompt.from_messages([
    ChatMessage(role=MessageRole.SYSTEM, content=SYSTEM),
    ChatMessage(role=MessageRole.USER, content="What is ({a} + {b}) * {c}?"),
])


def _call(name: str, **arguments: Any) -> Dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    ]}


def _answer(value: Dict[str, Any]) -> Dict[str, Any]:
    return {"role": "assistant", "content": json.dumps(value)}


def _run(server: Any, agent: ReActAgent, records: List[Dict[str, Any]]) -> List[Dict[Any, Any]]:
    """Run ``agent`` on the local runner, the connection and the tools on
    the environment (as 0.3.1's docs register them)."""
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.add_resource(
        "openai_server",
        ResourceType.CHAT_MODEL_CONNECTION,
        ResourceDescriptor(clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION,
                           base_url=server.base_url, max_retries=0, timeout_s=10.0),
    ).add_resource("add", ResourceType.TOOL, Tool.from_callable(add)).add_resource(
        "multiply", ResourceType.TOOL, Tool.from_callable(multiply)
    )
    out = env.from_list(records).apply(agent).to_list()
    env.execute()
    return out


def _agent(**kwargs: Any) -> ReActAgent:
    chat_model = ResourceDescriptor(
        clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
        connection="openai_server",
        model="gpt-test",
        tools=["add", "multiply"],
    )
    return ReActAgent(chat_model=chat_model, **kwargs)


def _schema_instruction(request: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The agent's schema instructions among the messages of ``request``."""
    return [m for m in request["messages"]
            if m["role"] == "system" and m["content"].startswith("The final response should be json format")]


def test_two_tool_rounds_then_a_structured_answer(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend([
        _call("add", a=2, b=3),
        _call("multiply", a=5, b=4),
        _answer({"result": 20, "steps": ["add", "multiply"]}),
    ])

    out = _run(server, _agent(prompt=CALC_PROMPT, output_schema=Calculation),
               [{"key": "q1", "value": {"a": 2, "b": 3, "c": 4}}])

    assert out == [{"q1": Calculation(result=20, steps=["add", "multiply"])}]
    assert isinstance(out[0]["q1"], Calculation)
    assert TOOL_RUNS == [("add", 2, 3), ("multiply", 5, 4)]
    assert len(server.requests) == 3
    first, second, third = server.requests
    # The prompt's system message first, the agent's schema instruction
    # after it, the user message filled with the input's fields last. (A
    # connection without native structured output also gets the chat
    # action's own instruction, after the first system message.)
    messages = first["messages"]
    assert messages[0] == {"role": "system", "content": SYSTEM}
    assert messages[-1] == {"role": "user", "content": "What is (2 + 3) * 4?"}
    (instruction,) = _schema_instruction(first)
    assert 0 < messages.index(instruction) < len(messages) - 1
    assert instruction["content"] == (
        "The final response should be json format, and match the schema "
        f"{json.dumps(Calculation.model_json_schema(), sort_keys=True)}."
    )
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["add", "multiply"]
    # Each round's tool result goes back to the model, once.
    assert [m["content"] for m in second["messages"] if m["role"] == "tool"] == ["5"]
    assert [m["content"] for m in third["messages"] if m["role"] == "tool"] == ["5", "20"]
    assert third["messages"][:len(messages)] == messages


def test_text_answer_without_schema_and_primitive_input(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend([_call("add", a=1, b=1), {"role": "assistant", "content": "It is 2."}])

    out = _run(server, _agent(), [{"key": "q", "value": "What is 1 + 1?"}])

    assert out == [{"q": "It is 2."}]
    assert TOOL_RUNS == [("add", 1, 1)]
    # No prompt, no schema: the input's text is the only message.
    assert server.requests[0]["messages"] == [{"role": "user", "content": "What is 1 + 1?"}]


def test_primitive_input_with_prompt_and_schema_without_system_message(scripted_chat_server):
    server = scripted_chat_server
    server.replies.append(_answer({"result": 7, "steps": []}))
    prompt = Prompt.from_messages([ChatMessage(role=MessageRole.USER, content="Question: {input}")])

    out = _run(server, _agent(prompt=prompt, output_schema=Calculation), [{"key": "q", "value": 7}])

    assert out == [{"q": Calculation(result=7, steps=[])}]
    messages = server.requests[0]["messages"]
    # No system message in the prompt: the schema instruction goes first.
    assert _schema_instruction(server.requests[0]) == [messages[0]]
    assert messages[-1] == {"role": "user", "content": "Question: 7"}


@pytest.mark.parametrize("value", [
    {"a": 2, "b": 3, "c": 4},
    Row(a=2, b=3, c=4),
    Operands(a=2, b=3, c=4),
], ids=["dict", "row", "pydantic"])
def test_structured_inputs_fill_the_prompt_with_their_fields(scripted_chat_server, value):
    server = scripted_chat_server
    server.replies.append({"role": "assistant", "content": "20"})

    out = _run(server, _agent(prompt=CALC_PROMPT), [{"key": "q", "value": value}])

    assert out == [{"q": "20"}]
    assert server.requests[0]["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is (2 + 3) * 4?"},
    ]
    assert _schema_instruction(server.requests[0]) == []


def test_dict_input_without_prompt_is_a_clear_error(scripted_chat_server):
    with pytest.raises(ActionFailed) as failed:
        _run(scripted_chat_server, _agent(), [{"key": "q", "value": {"a": 2}}])

    assert failed.value.action == "start_action"
    assert isinstance(failed.value.cause, RuntimeError)
    message = str(failed.value.cause)
    assert "dict" in message and "prompt" in message
    assert scripted_chat_server.requests == []


def test_input_without_named_fields_is_a_clear_error(scripted_chat_server):
    with pytest.raises(ActionFailed) as failed:
        _run(scripted_chat_server, _agent(prompt=CALC_PROMPT), [{"key": "q", "value": [2, 3, 4]}])

    assert "list" in str(failed.value.cause) and "no named fields" in str(failed.value.cause)
    assert scripted_chat_server.requests == []


def test_the_step_bound_stops_a_looping_model_before_its_tools_run(scripted_chat_server):
    server = scripted_chat_server
    server.set_reply_fn(lambda body, index: _call("add", a=index, b=1))

    with pytest.raises(ActionFailed) as failed:
        _run(server, _agent(max_iterations=2), [{"key": "q", "value": "count up"}])

    cause = failed.value.cause
    assert isinstance(cause, ReActStepLimitReached)
    assert (cause.agent, cause.limit) == ("ReActAgent", 2)
    assert [c["function"]["name"] for c in cause.tool_calls] == ["add"]
    message = str(cause)
    assert "ReActAgent" in message and "limit of 2 tool rounds" in message
    assert 'add({"a": 2, "b": 1})' in message  # the refused round's call
    # Two rounds ran; the third was asked for and refused before it ran.
    assert TOOL_RUNS == [("add", 0, 1), ("add", 1, 1)]
    assert len(server.requests) == 3


def test_the_step_bound_allows_exactly_max_iterations_rounds(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend([_call("add", a=1, b=1), _call("add", a=2, b=2), {"role": "assistant", "content": "4"}])

    out = _run(server, _agent(max_iterations=2), [{"key": "q", "value": "add twice"}])

    assert out == [{"q": "4"}]
    assert len(TOOL_RUNS) == 2


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_iterations"):
        _agent(max_iterations=0)
    with pytest.raises(TypeError, match="output_schema"):
        _agent(output_schema=int)


def test_an_answer_off_the_schema_is_asked_again(scripted_chat_server):
    server = scripted_chat_server
    server.replies.extend([
        {"role": "assistant", "content": '{"result": "twenty"}'},
        _answer({"result": 20, "steps": ["guess"]}),
    ])

    out = _run(server, _agent(output_schema=Calculation), [{"key": "q", "value": "What is 4 * 5?"}])

    assert out == [{"q": Calculation(result=20, steps=["guess"])}]
    assert len(server.requests) == 2
    reask = server.requests[1]["messages"][-1]
    assert reask["role"] == "user" and "result" in reask["content"]


# --- 0.3.1's quickstart (docs/content/docs/get-started/quickstart/react_agent.md), unchanged
# but for the Ollama server's address: the scripted Ollama server.

class ProductReview(BaseModel):
    id: str
    review: str


class ProductReviewAnalysisRes(BaseModel):
    id: str
    score: int
    reasons: List[str]


NOTIFIED: List[Dict[str, str]] = []


def notify_shipping_manager(id: str, review: str) -> None:
    """Notify the shipping manager when product received a negative review due to
    shipping damage.

    Parameters
    ----------
    id : str
        The id of the product that received a negative review due to shipping damage
    review: str
        The negative review content
    """
    NOTIFIED.append({"id": id, "review": review})


review_analysis_react_prompt = Prompt.from_messages(
    messages=[
        ChatMessage(role=MessageRole.SYSTEM, content="Analyze the user review and product information."),
        ChatMessage(
            role=MessageRole.USER,
            content="""
            "id": {id},
            "review": {review}
            """,
        ),
    ],
)


def test_031_quickstart_usage_unchanged():
    review = ProductReview(id="P7", review="The box arrived crushed.")
    NOTIFIED.clear()
    with OllamaScriptedServer([
        _call("notify_shipping_manager", id="P7", review=review.review),
        _answer({"id": "P7", "score": 1, "reasons": ["shipping damage"]}),
    ]) as server:
        agents_env = AgentsExecutionEnvironment.get_execution_environment()
        agents_env.add_resource(
            "ollama_server",
            ResourceType.CHAT_MODEL_CONNECTION,
            ResourceDescriptor(clazz=ResourceName.ChatModel.OLLAMA_CONNECTION, request_timeout=120,
                               base_url=server.base_url),
        ).add_resource(
            "notify_shipping_manager", ResourceType.TOOL, Tool.from_callable(notify_shipping_manager)
        )
        review_analysis_react_agent = ReActAgent(
            chat_model=ResourceDescriptor(
                clazz=ResourceName.ChatModel.OLLAMA_SETUP,
                connection="ollama_server",
                model="qwen3:8b",
                tools=["notify_shipping_manager"],
            ),
            prompt=review_analysis_react_prompt,
            output_schema=ProductReviewAnalysisRes,
        )
        out = agents_env.from_list([{"key": review.id, "value": review}]).apply(review_analysis_react_agent).to_list()
        agents_env.execute()

    assert out == [{"P7": ProductReviewAnalysisRes(id="P7", score=1, reasons=["shipping damage"])}]
    assert NOTIFIED == [{"id": "P7", "review": "The box arrived crushed."}]
    first = server.requests[0]
    user = first["messages"][-1]
    assert '"id": P7' in user["content"] and '"review": The box arrived crushed.' in user["content"]
    # Ollama gets the schema natively (its "format"), with the agent's instruction.
    assert first["format"] == ProductReviewAnalysisRes.model_json_schema()
    assert len(_schema_instruction(first)) == 1


# --- 0.3.1's own ReAct test on the local runner (e2e_tests_integration/react_agent_test.py),
# unchanged but for the provider (Ollama there).

class InputData(BaseModel):
    a: int
    b: int
    c: int


class OutputData(BaseModel):
    result: int


def test_031_react_agent_on_local_runner(scripted_chat_server):
    from flink_agents.api.core_options import AgentExecutionOptions, ErrorHandlingStrategy

    server = scripted_chat_server
    server.replies.extend([
        _call("add", a=2123, b=2321),
        _call("multiply", a=4444, b=312),
        _answer({"result": 1386528}),
    ])
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().set(AgentExecutionOptions.ERROR_HANDLING_STRATEGY, ErrorHandlingStrategy.RETRY)
    env.get_config().set(AgentExecutionOptions.MAX_RETRIES, 3)
    (
        env.add_resource(
            "openai",
            ResourceType.CHAT_MODEL_CONNECTION,
            ResourceDescriptor(clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, base_url=server.base_url),
        )
        .add_resource("add", ResourceType.TOOL, Tool.from_callable(add))
        .add_resource("multiply", ResourceType.TOOL, Tool.from_callable(multiply))
    )
    prompt = Prompt.from_messages(
        messages=[
            ChatMessage(role=MessageRole.SYSTEM, content='An example of output is {"result": 30.32}.'),
            ChatMessage(role=MessageRole.USER, content="What is ({a} + {b}) * {c}"),
        ],
    )
    agent = ReActAgent(
        chat_model=ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
            connection="openai",
            model="gpt-test",
            tools=["add", "multiply"],
        ),
        prompt=prompt,
        output_schema=OutputData,
    )
    input_list = []
    output_list = env.from_list(input_list).apply(agent).to_list()
    input_list.append({"key": "0001", "value": InputData(a=2123, b=2321, c=312)})
    env.execute()

    assert len(output_list) == 1
    assert int(output_list[0]["0001"].result) == 1386528
    assert TOOL_RUNS == [("add", 2123, 2321), ("multiply", 4444, 312)]
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": "What is (2123 + 2321) * 312"}


def test_a_step_bound_reached_or_an_unusable_input_is_terminal_not_retried() -> None:
    """The same input to the same model would end the same way: the retry
    strategy must not run the action again (runtime.errors.classify)."""
    from flink_agents.api.agents.react_agent import ReActInputError, ReActStepLimitReached
    from flink_agents.runtime.errors import TERMINAL, classify

    assert classify(ReActStepLimitReached("ReActAgent", 2, [])) == TERMINAL
    assert classify(ReActInputError("list", "no prompt for a list input")) == TERMINAL
    assert classify(RuntimeError("a tool failed")) != TERMINAL
