"""An agent written for Flink Agents HEAD (``EventType``, a trigger
condition expression, event lineage), run on the mini-cluster by
tests/e2e/test_compat031_agents_e2e.py beside the 0.3.1 agents."""

from __future__ import annotations

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import Event, OutputEvent
from flink_agents.api.events.event_type import EventType
from flink_agents.api.runner_context import RunnerContext


class ScoreLineageAgent(Agent):
    """Input ``{"id", "score"}``: a ``scored`` event; an expression picks the
    high ones, which report the lineage they arrived with."""

    @action(EventType.InputEvent)
    @staticmethod
    def score(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(Event(type="scored", attributes={"id": event.input["id"], "score": event.input["score"],
                                                         "input_id": str(event.id)}))

    @action("type == 'scored' && score > 5")
    @staticmethod
    def high(event: Event, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output={
            "head": event.get_attr("id"),
            "from": event.upstream_action_name,
            "lineage_ok": str(event.upstream_event_id) == event.get_attr("input_id"),
        }))
