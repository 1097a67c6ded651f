"""The built-in chat action's token counters, counted once per model call
in the engine that runs the record (docs/durability.md, "Usage").

The usage a provider reports travels in the reply's ``extra_args``
(``usage: {prompt_tokens, completion_tokens}``, or Flink Agents 0.3.1's
``promptTokens``/``completionTokens``/``model_name``), so it is journaled
with the reply. A call is counted when its reply reaches the action, run or
replayed (``ActionContext.journaled_call``'s ``count``); the calls of steps
a replay does not run again (their completion journaled) are counted from
the journal when the record's run ends (``count_replayed``). ``Run.counted``
holds the positions counted, so no call counts twice in one run.
"""

from __future__ import annotations

import json
from typing import Any

from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.metric_group import MetricGroup
from flink_agents.api.resource import ResourceType
from flink_agents.runtime.durability.codec import decode_outcome
from flink_agents.runtime.execution.run import Run

__all__ = ["CHAT_PREFIX", "count_replayed", "count_tokens"]

CHAT_PREFIX = "chat:"  # the function id of a built-in model call: chat:<setup resource>


def count_tokens(action_group: MetricGroup, model: Any, resource: str, reply: Any) -> None:
    """Add ``reply``'s usage to ``action.<a>.model.<m>.promptTokens`` and
    ``.completionTokens`` under ``action_group``; ``m`` is the provider's
    model name, else ``model`` (the setup's), else ``resource``. Nothing is
    counted when the provider reported no usage."""
    extra = getattr(reply, "extra_args", None) or {}
    usage = extra.get("usage") if isinstance(extra.get("usage"), dict) else {}
    prompt = usage.get("prompt_tokens", extra.get("promptTokens"))
    completion = usage.get("completion_tokens", extra.get("completionTokens"))
    if prompt is None and completion is None:
        return
    name = extra.get("model_name") or model or resource
    group = action_group.get_sub_group("model", str(name))
    group.get_counter("promptTokens").inc(int(prompt or 0))
    group.get_counter("completionTokens").inc(int(completion or 0))


def count_replayed(run: Run) -> None:
    """Count the built-in model calls of ``run``'s journal not counted yet
    (those of steps replayed from their completion), under the action of
    their step (``"<action>@<n>[/<branch>]"``). Errors and entries of
    framework turns (not ``ChatMessage`` replies) count nothing."""
    setups = run.plan.resources.get(ResourceType.CHAT_MODEL, {})
    for entry in run.journal.journaled_entries():
        position = (entry.step, entry.ordinal)
        resource = entry.function_id[len(CHAT_PREFIX):]
        if not entry.function_id.startswith(CHAT_PREFIX) or resource not in setups or position in run.counted:
            continue
        run.counted.add(position)
        if "error" in json.loads(entry.payload):
            continue  # a failed call reported no usage
        reply = decode_outcome(entry.payload)
        if isinstance(reply, ChatMessage):
            setup = run.resources(resource, ResourceType.CHAT_MODEL)
            action = entry.step.split("@", 1)[0]
            count_tokens(run.counters.metrics.builtin.action_group(action), getattr(setup, "model", None),
                         resource, reply)
