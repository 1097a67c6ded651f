"""The built-in offline "local" chat model and its lexicon."""
from __future__ import annotations

import asyncio
import json
from typing import Any, Dict

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.decorators import action, chat_model_connection, chat_model_setup, tool
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceName
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.tools.tool import FunctionTool
from flink_agents.integrations.chat_models.local.lexicon import analyze, has_shipping_damage, lexicon_size
from flink_agents.integrations.chat_models.local.local_chat_model import (
    LOCAL_CALL_ID,
    LocalChatModelConnection,
    local_reply,
    read_input,
)
from tests.support.notify_tool import (  # noqa: F401 (clear_notified: an autouse fixture)
    NOTIFIED,
    NOTIFY,
    clear_notified,
    record_notification,
)

DAMAGED = {"id": "B01", "review": "The box was crushed and the shoes arrived damaged."}
# "crushed" near "box" and "damaged" near "arrived": shipping damage; the
# total, damaged -2 + DAMAGE_WEIGHT -2.5 = -4.5, gives tanh(-1.5) = -0.91 -> 1.69.
DAMAGED_VERDICT = {"score": 1, "reasons": ["reports shipping damage"]}


def _user(content: Any) -> ChatMessage:
    text = content if isinstance(content, str) else json.dumps(content)
    return ChatMessage(role=MessageRole.USER, content=text)


def _verdict(reply: ChatMessage) -> Dict[str, Any]:
    assert reply.role == MessageRole.ASSISTANT and not reply.tool_calls
    verdict = json.loads(reply.content)
    assert set(verdict) == {"score", "reasons"}
    assert 1 <= verdict["score"] <= 5 and 1 <= len(verdict["reasons"]) <= 3
    return verdict


# Expected scores worked out by hand from the lexicon's weights and
# ``score = floor(3 + 2 * tanh(total / 3) + 0.5)``, clamped to 1..5.
@pytest.mark.parametrize(
    "review, score",
    [
        # love 3 + so*comfortable 1.4*2.5 + true_to_size 2.5 = 9.0
        ("Love these shoes! So comfortable and true to size.", 5),
        # great 2.5 + very*lightweight 1.5*2 = 5.5: tanh(1.83) = 0.95 -> 5.40
        ("Great shoes, very lightweight.", 5),
        # terrible -3 + fell_apart -3 + very*disappointed 1.5*-2.5 = -9.75
        ("Terrible quality, they fell apart after a week. Very disappointed.", 1),
        # too_small -2 + hurt -2 = -4: tanh(-1.33) = -0.87 -> 1.76
        ("Too small and they hurt my feet.", 1),
        # great 2.5 alone: tanh(0.83) = 0.68 -> 4.86
        ("Great.", 4),
        # no lexicon term: total 0
        ("Arrived on Tuesday. Black.", 3),
        ("", 3),
    ],
)
def test_scores(review, score):
    assert _verdict(local_reply([_user({"id": "x", "review": review})]))["score"] == score


def test_reasons():
    assert _verdict(local_reply([_user("Black, size 8.")]))["reasons"] == ["no strong sentiment words"]
    mixed = _verdict(local_reply([_user("Very comfortable, but they run small.")]))
    assert mixed["reasons"][:2] == ["praises comfort", "complains about sizing"]
    assert analyze("Great price!").reasons == ["praises value for money"]


def test_negation_and_intensifiers():
    assert analyze("I like them").score > 3 > analyze("I don't like them").score
    assert analyze("These are not comfortable").score < 3
    assert analyze("Not bad at all").score > 3
    assert analyze("No complaints").score > 3
    assert analyze("my feet don't hurt").score > 3
    assert analyze("very good").total > analyze("good").total > analyze("slightly good").total


@pytest.mark.parametrize(
    "text, damaged",
    [
        ("The box was crushed.", True),
        ("They arrived broken.", True),
        ("Damaged in transit, the sole is cracked.", True),
        ("The magazine was already damaged when I received it, the whole book was wet!", True),
        ("Package was dented and one shoe was smashed", True),
        ("The strap broke after a week.", False),
        ("They need to be broken in, but arrived fast.", False),
        ("Arrived on time, nothing damaged.", False),
        ("Great toe box, a little torn after a month of running.", False),
    ],
)
def test_shipping_damage_detection(text, damaged):
    assert has_shipping_damage(text) is damaged


def test_shipping_damage_calls_the_tool_then_answers():
    conversation = [ChatMessage(role=MessageRole.SYSTEM, content="Reply with keys rating, why."), _user(DAMAGED)]
    call_reply = local_reply(conversation, [NOTIFY])
    assert call_reply.content == ""
    assert call_reply.tool_calls == [{
        "id": LOCAL_CALL_ID,
        "type": "function",
        "function": {"name": "notify_shipping_manager", "arguments": DAMAGED},
        "original_id": LOCAL_CALL_ID,
    }]
    conversation += [
        call_reply,
        ChatMessage(role=MessageRole.TOOL, content="notified", extra_args={"tool_call_id": LOCAL_CALL_ID}),
    ]
    # damaged -2 (counted as damage, no aspect) + DAMAGE_WEIGHT -2.5 = -4.5 -> 1
    assert _verdict(local_reply(conversation, [NOTIFY])) == DAMAGED_VERDICT

    # A new user turn about another damaged delivery calls the tool again.
    again = local_reply(conversation + [_user({"id": "B02", "review": "Arrived broken."})], [NOTIFY])
    assert again.tool_calls[0]["function"]["arguments"] == {"id": "B02", "review": "Arrived broken."}


def test_damage_without_the_tool_answers_directly():
    assert _verdict(local_reply([_user(DAMAGED)])) == DAMAGED_VERDICT
    other = FunctionTool.from_callable(lambda text: text, name="echo")
    assert not local_reply([_user(DAMAGED)], [other]).tool_calls


def test_tool_arguments_from_plain_text():
    def notify_shipping_manager(review_text: str, order_id: str = "", urgent: bool = False) -> str:
        """Notify."""
        return "ok"

    notify = FunctionTool.from_callable(notify_shipping_manager)
    text = "Arrived broken, box crushed."
    reply = local_reply([_user(text)], [notify])
    assert reply.tool_calls[0]["function"]["arguments"] == {"review_text": text}


def test_read_input():
    assert read_input('{"id": 7, "review": "ok"}') == ("ok", {"id": 7, "review": "ok"})
    assert read_input('Rate this: {"id": 7, "review": "ok"} thanks') == ("ok", {"id": 7, "review": "ok"})
    assert read_input("plain {text}") == ("plain {text}", {})
    assert read_input('{"id": 7}') == ('{"id": 7}', {"id": 7})


def test_uses_the_last_user_message():
    conversation = [_user("Terrible, awful, broken."), ChatMessage(role=MessageRole.ASSISTANT, content="..."), _user("Perfect!")]
    # perfect 3 alone: tanh(1) = 0.76 -> 5.02
    assert _verdict(local_reply(conversation)) == {"score": 5, "reasons": ["expresses overall satisfaction"]}


def test_deterministic_and_async():
    conversation = [_user(DAMAGED)]
    connection = LocalChatModelConnection()
    call = ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[{
        "id": LOCAL_CALL_ID,
        "type": "function",
        "function": {"name": "notify_shipping_manager", "arguments": DAMAGED},
        "original_id": LOCAL_CALL_ID,
    }])
    # Model settings change nothing; every call, sync or async, gives the same reply.
    assert connection.chat(conversation, [NOTIFY], model="local", temperature=0.7) == call
    assert [connection.chat(conversation, [NOTIFY]) for _ in range(5)] == [call] * 5
    assert asyncio.run(connection.achat(conversation, [NOTIFY])) == call
    # love 3, then "but": x0.7 before it (2.1), x1.3 after it (bit_tight -1 -> -1.3):
    # total 0.8, tanh(0.27) = 0.26 -> 4.02; the review's number changes nothing.
    reviews = [{"id": str(n), "review": f"review {n}: love it, but a bit tight"} for n in range(20)]
    verdict = {"score": 4, "reasons": ["expresses overall satisfaction", "complains about sizing"]}
    assert [json.loads(local_reply([_user(r)]).content) for r in reviews] == [verdict] * 20


def test_lexicon_size():
    assert 150 <= lexicon_size() <= 250


class LocalReviewAgent(Agent):
    """Scores reviews with the built-in local model, declared the 0.3 way."""

    @chat_model_connection
    @staticmethod
    def local() -> ResourceDescriptor:
        return ResourceDescriptor(clazz=ResourceName.ChatModel.LOCAL_CONNECTION)

    @chat_model_setup
    @staticmethod
    def analyst() -> ResourceDescriptor:
        return ResourceDescriptor(
            clazz=ResourceName.ChatModel.LOCAL_SETUP,
            connection="local",
            prompt=Prompt.from_text("Analyze the review; reply as JSON with score and reasons."),
            tools=["notify_shipping_manager"],
        )

    @tool
    @staticmethod
    def notify_shipping_manager(id: str, review: str) -> str:
        """Tell the shipping manager about a damaged delivery.

        Args:
            id: The product id.
            review: The customer's review.
        """
        return record_notification(id, review)

    @action(InputEvent)
    @staticmethod
    def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.send_event(ChatRequestEvent(model="analyst", messages=[_user(event.input)]))

    @action(ChatResponseEvent)
    @staticmethod
    def on_response(event: ChatResponseEvent, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output=json.loads(event.response.content)))


def test_runs_through_the_local_runner():
    records = [
        {"key": "B00", "value": {"id": "B00", "review": "Love them, so comfortable!"}},
        {"key": "B01", "value": DAMAGED},
        {"key": "B02", "value": {"id": "B02", "review": "Way too small, returned them."}},
    ]
    env = AgentsExecutionEnvironment.get_execution_environment()
    out = env.from_list(records).apply(LocalReviewAgent()).to_list()
    env.execute()

    by_key = {key: value for entry in out for key, value in entry.items()}
    assert by_key == {
        # love 3 + so*comfortable 1.4*2.5 = 6.5 -> 5; comfort (3.5) outweighs general (3)
        "B00": {"score": 5, "reasons": ["praises comfort", "expresses overall satisfaction"]},
        # after the tool call and its result
        "B01": DAMAGED_VERDICT,
        # too_small -2 + returned -1.5 = -3.5: tanh(-1.17) = -0.82 -> 1.85
        "B02": {"score": 1, "reasons": ["complains about sizing", "expresses overall dissatisfaction"]},
    }
    assert NOTIFIED == [DAMAGED]
