"""A skill-using chat agent on the local mini-cluster (issue 15, "Skills").

The agent declares skills from a directory with ``@skills``-style
``add_resource``; its chat model setup lists one of them. A scripted model
(a ``BaseChatModelConnection`` in this module, shipped to the Python worker
by value) checks that the skill list reached it, calls ``load_skill`` for
the instructions and for a file of the skill, and answers with what it got.
On the worker the skills are read from the directory, the tool calls go
through the built-in tool loop, and each key's output carries the skill's
instructions: the same as on the local runner.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, List, Sequence

import cloudpickle

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.chat_model import BaseChatModelConnection, BaseChatModelSetup
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.skills import LOAD_SKILL_TOOL, Skills
from flink_agents.api.tools.tool import Tool

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SKILL_MD = """---
name: order-triage
description: Triage an order complaint into refund, resend or reply. Use for any order complaint.
---

# Order triage

1. Read the complaint.
2. Pick one of the labels in labels.txt.
3. Answer with the label only.
"""


class TriageModel(BaseChatModelConnection):
    """Round 0: load the skill and its labels file. Then: a JSON answer with
    whether the skill list was in a system message and the tool results."""

    def chat(self, messages: Sequence[ChatMessage], tools: List[Tool] | None = None, **kwargs: Any) -> ChatMessage:
        results = [str(m.content) for m in messages if m.role == MessageRole.TOOL]
        if not results:
            return ChatMessage(role=MessageRole.ASSISTANT, tool_calls=[
                {"id": "a", "type": "function", "function": {"name": LOAD_SKILL_TOOL, "arguments": {"name": "order-triage"}}},
                {"id": "b", "type": "function", "function": {
                    "name": LOAD_SKILL_TOOL, "arguments": {"name": "order-triage", "path": "labels.txt"}}},
            ])
        listed = any(
            m.role == MessageRole.SYSTEM and "<name>order-triage</name>" in str(m.content) for m in messages
        )
        return ChatMessage(role=MessageRole.ASSISTANT, content=json.dumps({
            "listed": listed, "tools": [t.name for t in tools or []], "results": results,
        }))


class TriageSetup(BaseChatModelSetup):
    pass


def _ask(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(ChatRequestEvent(model="model", messages=[
        ChatMessage(role=MessageRole.USER, content=event.input["complaint"]),
    ]))


def _answer(event: ChatResponseEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={"key": ctx.key, **json.loads(event.response.content)}))


class TriageAgent(Agent):
    def __init__(self, skills_dir: str) -> None:
        super().__init__()
        self.add_resource("triage_skills", ResourceType.SKILLS, Skills.from_local_dir(skills_dir))
        self.add_resource("conn", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(clazz=TriageModel))
        self.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(
            clazz=TriageSetup, connection="conn", skills=["order-triage"],
        ))
        self.add_action("ask", [InputEvent], _ask)
        self.add_action("answer", [ChatResponseEvent], _answer)


def _key(record: Any) -> str:
    return record["k"]


def test_a_skill_using_agent_on_the_mini_cluster_loads_the_skill_through_the_tool_loop(tmp_path: Path) -> None:
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    skill = tmp_path / "skills" / "order-triage"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD, encoding="utf-8")
    (skill / "labels.txt").write_text("refund\nresend\nreply\n", encoding="utf-8")

    config = Configuration()
    config.set_string("restart-strategy.type", "none")
    config.set_string("python.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    records = [{"k": f"order-{i}", "complaint": f"order {i} arrived broken"} for i in range(3)]
    stream = (
        agents_env.from_datastream(env.from_collection(records), _key)
        .apply(TriageAgent(str(tmp_path / "skills")))
        .to_datastream()
    )
    with stream.execute_and_collect("skills-e2e") as collected:
        outputs = sorted(collected, key=lambda o: o["key"])

    assert [o["key"] for o in outputs] == ["order-0", "order-1", "order-2"]
    for output in outputs:
        assert output["listed"] is True
        assert output["tools"] == [LOAD_SKILL_TOOL]
        instructions, labels = output["results"]
        assert instructions.startswith('<skill_content name="order-triage">\n# Skill: order-triage\n\n# Order triage\n')
        assert "<file>labels.txt</file>" in instructions
        assert labels == "refund\nresend\nreply\n"
