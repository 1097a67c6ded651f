"""``ReActAgent`` on the Flink mini-cluster, with a worker crash in the middle
of its tool loop: after the restart the journal replays what completed
before the crash (model calls and tool calls), so no model request is sent
twice and no tool's effect happens twice.

The model (scripted OpenAI server) asks for ``add``, then for ``multiply``,
then answers with JSON matching the agent's ``RowTypeInfo`` output schema.
``multiply`` kills its Python worker (``os._exit``) the first time it runs,
before its effect: the job restarts (fixed-delay strategy), and the record's
run resumes from the SQLite journal.

Built as tests/e2e/test_failover_e2e.py: a checkpointed, watched ``FileSource``
input, workers in processes of their own (so that ``os._exit`` ends only a
worker), spare TaskManagers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict

import cloudpickle
import pytest

from flink_agents.api.agents.react_agent import ReActAgent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.tools.tool import Tool
from tests.support.flink_jobs import Collected, jsonl_stream, mini_cluster_env, write_jsonl

# The tools and the key selector run in Flink's Python workers, which cannot
# import this module by name: ship them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# Where the tools write: set by the test before the job is built, and
# shipped with the tools (by value) to the workers.
LEDGER: Dict[str, str] = {}


def _note(kind: str, line: str) -> None:
    with open(Path(LEDGER["dir"]) / kind, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    _note("attempts", f"add {os.getpid()}")
    _note("effects", f"add {a} {b}")
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    _note("attempts", f"multiply {os.getpid()}")
    marker = Path(LEDGER["dir"]) / "crashed"
    if not marker.exists():
        # The first run dies before its effect, with no cleanup: the job restarts.
        marker.write_text(str(time.time()), encoding="utf-8")
        os._exit(1)
    _note("effects", f"multiply {a} {b}")
    return a * b


def question_id(record: Dict[str, Any]) -> str:
    return record["id"]


PROMPT = Prompt.from_messages([
    ChatMessage(role=MessageRole.SYSTEM, content="Compute with the tools, one step at a time."),
    ChatMessage(role=MessageRole.USER, content="Question {id}: what is ({a} + {b}) * {c}?"),
])


def _tool_call(name: str, **arguments: Any) -> Dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    ]}


def _request_key(body: Dict[str, Any]) -> tuple:
    """A model request by content: the question and the tool results so far."""
    messages = body["messages"]
    question = next(m["content"] for m in messages if m["role"] == "user")
    return question, tuple(m["content"] for m in messages if m["role"] == "tool")


def _model(body: Dict[str, Any], index: int) -> Dict[str, Any]:
    """The scripted model: add, then multiply, then the answer."""
    results = _request_key(body)[1]
    if len(results) == 0:
        return _tool_call("add", a=2, b=3)
    if len(results) == 1:
        return _tool_call("multiply", a=int(results[0]), b=4)
    return {"role": "assistant", "content": json.dumps({"result": int(results[1]), "summary": "(2 + 3) * 4"})}


@pytest.mark.timeout(240)
def test_react_loop_resumes_after_a_worker_crash_without_repeating_journaled_calls(
    scripted_chat_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyflink.common import Types
    from pyflink.common.typeinfo import BasicTypeInfo, RowTypeInfo

    ledger = tmp_path / "ledger"
    ledger.mkdir()
    LEDGER["dir"] = str(ledger)
    scripted_chat_server.set_reply_fn(_model)
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    write_jsonl(input_dir / "questions.jsonl", [{"id": "q1", "a": 2, "b": 3, "c": 4}])

    # A real crash needs the Python workers in processes of their own
    # (loopback mode runs them in this process).
    monkeypatch.setenv("_python_worker_execution_mode", "process")
    env = mini_cluster_env(1, tmp_path / "checkpoints", 500, restart_attempts=3, **{
        # A failover now and then takes its TaskManager with it (Beam's
        # "Reference count must not be negative"): spares stand in.
        "minicluster.number-of-taskmanagers": "2",
    })
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    agents_env.add_resource(
        "openai_server",
        ResourceType.CHAT_MODEL_CONNECTION,
        ResourceDescriptor(clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION,
                           base_url=scripted_chat_server.base_url, max_retries=0, timeout_s=10.0),
    ).add_resource("add", ResourceType.TOOL, Tool.from_callable(add)).add_resource(
        "multiply", ResourceType.TOOL, Tool.from_callable(multiply)
    )
    agent = ReActAgent(
        chat_model=ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
            connection="openai_server",
            model="gpt-test",
            tools=["add", "multiply"],
        ),
        prompt=PROMPT,
        output_schema=RowTypeInfo([BasicTypeInfo.INT_TYPE_INFO(), BasicTypeInfo.STRING_TYPE_INFO()],
                                  ["result", "summary"]),
    )
    questions = jsonl_stream(env, input_dir, "questions", "questions-source", "decode-questions")
    outputs = agents_env.from_datastream(questions, question_id, key_type=Types.STRING()).apply(agent).to_datastream()

    started = time.monotonic()
    job = Collected(outputs, "react-failover")
    try:
        (output,) = job.take(1, timeout_s=150)
        elapsed = time.monotonic() - started
    finally:
        job.close()

    # The answer, validated against the schema, is the output.
    assert output.as_dict() == {"result": 20, "summary": "(2 + 3) * 4"}
    # The worker crashed once, in multiply, and the job went on in a new one.
    assert (ledger / "crashed").is_file(), "multiply never crashed the worker"
    attempts = (ledger / "attempts").read_text().split("\n")[:-1]
    assert [line.split()[0] for line in attempts] == ["add", "multiply", "multiply"]
    assert attempts[1].split()[1] != attempts[2].split()[1], "multiply ran again in the crashed worker?"
    # add completed before the crash: journaled, not run again. multiply's
    # effect happened once (its first run died before it).
    assert (ledger / "effects").read_text().split("\n")[:-1] == ["add 2 3", "multiply 5 4"]
    # Each model request was sent exactly once: the two answered before the
    # crash were replayed from the journal.
    question = "Question q1: what is (2 + 3) * 4?"
    requests = Counter(_request_key(body) for body in scripted_chat_server.requests)
    assert requests == Counter({(question, ()): 1, (question, ("5",)): 1, (question, ("5", "20")): 1})
    print(f"\nReAct failover job: output after {elapsed:.1f} s, {len(scripted_chat_server.requests)} model requests")
