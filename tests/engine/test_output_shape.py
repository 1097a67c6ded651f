"""What downstream operators receive from the agent operator: JSON-like data
by default (as Flink Agents 0.3.1, whose e2e tests ``json.dumps`` each
output), the objects themselves with ``to_datastream(typed_outputs=True)``;
and the local runner's list, in input order as 0.3.1's."""

from __future__ import annotations

import datetime as dt
import enum
import json
import time
from typing import Any

import pytest
from pydantic import BaseModel
from pyflink.common import Row

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.runtime.flink.output_shape import OutputShapeError, json_like
from tests.support import recording_flink


class Tier(enum.Enum):
    GOLD = "gold"


class Review(BaseModel):
    id: int
    tags: tuple
    at: dt.datetime
    tier: Tier


REVIEW = Review(id=7, tags=("a", "b"), at=dt.datetime(2024, 5, 1, 12, 30), tier=Tier.GOLD)


def emit_review(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output={"review": REVIEW, "row": Row(id=1, text="ok"), "n": {1: float("nan")}}))


def _review_agent() -> Agent:
    return Agent().add_action("emit", [InputEvent], emit_review)


def test_the_operator_hands_json_like_outputs_downstream_by_default() -> None:
    run = recording_flink.run(_review_agent(), [{"key": "k", "value": "x"}], typed_outputs=False)

    assert run.failure is None
    [output] = run.outputs
    assert output["review"] == {"id": 7, "tags": ["a", "b"], "at": "2024-05-01T12:30:00", "tier": "gold"}
    assert output["n"] == {"1": None}
    assert isinstance(output["row"], Row) and output["row"].as_dict() == {"id": 1, "text": "ok"}
    json.dumps({k: v for k, v in output.items() if k != "row"})  # what 0.3.1's own tests do with it


def test_typed_outputs_hands_the_objects_the_action_built() -> None:
    run = recording_flink.run(_review_agent(), [{"key": "k", "value": "x"}], typed_outputs=True)

    assert run.failure is None
    [output] = run.outputs
    assert output["review"] == REVIEW and isinstance(output["review"], Review)


def test_an_output_json_cannot_carry_fails_naming_its_key_and_the_option() -> None:
    agent = Agent().add_action("emit", [InputEvent], lambda e, ctx: ctx.send_event(OutputEvent(output={"error": ValueError("boom")})))

    run = recording_flink.run(agent, [{"key": "order-9", "value": "x"}], typed_outputs=False)

    assert isinstance(run.failure, OutputShapeError)
    assert "'order-9'" in str(run.failure) and "typed_outputs=True" in str(run.failure)


@pytest.mark.parametrize("value", ["text", 3, 2.5, True, None, [1, "a"], {"a": {"b": [1]}}])
def test_json_values_pass_unchanged(value: Any) -> None:
    assert json_like("k", value) == value


def _slow_for_first_key(event: InputEvent, ctx: Any) -> None:
    key, text = event.input
    if key == "bob" and text == "1":
        time.sleep(0.2)  # bob's first record finishes after john's
    ctx.send_event(OutputEvent(output=f"{key}:{text}:first"))
    ctx.send_event(OutputEvent(output=f"{key}:{text}:second"))


def test_the_local_runners_list_is_in_input_order_whatever_order_runs_finish_in() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    records = [{"key": k, "value": (k, t)} for k, t in [("bob", "1"), ("john", "1"), ("john", "2"), ("bob", "2")]]
    outputs = env.from_list(records).apply(Agent().add_action("a", [InputEvent], _slow_for_first_key)).to_list()

    env.execute()

    assert outputs == [
        {k: f"{k}:{t}:{part}"} for k, t in [("bob", "1"), ("john", "1"), ("john", "2"), ("bob", "2")]
        for part in ("first", "second")
    ]
