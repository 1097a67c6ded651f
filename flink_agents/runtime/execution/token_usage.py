"""The built-in chat action's token counters, counted once per model call
in the engine that runs the record (docs/durability.md, "Usage").

The usage a provider reports travels in the reply's ``extra_args``
(``usage: {prompt_tokens, completion_tokens}``, or Flink Agents 0.3.1's
``promptTokens``/``completionTokens``/``model_name``), so it is journaled
with the reply. A call is counted when its reply reaches the action, run or
replayed (``ActionContext.journaled_call``'s ``count``); the calls of steps
a replay does not run again (their completion journaled) are counted from
the journal when the record's run ends, however it ends: done, skipped or
failed (``count_replayed``). ``Run.counted`` holds the positions counted,
so no call counts twice in one run (a retried action replays its failed
attempt's calls without counting them again).

A sub-agent call journals, with its result, the tokens its child's run
counted (``Run.tokens``: ``[action, model, prompt, completion]`` each,
grandchildren included); a replay that returns the result without running
the child counts them (``count_sub_agent``).
"""

from __future__ import annotations

import json
from typing import Any, Optional, Tuple

from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.metric_group import MetricGroup
from flink_agents.api.resource import ResourceType
from flink_agents.runtime.durability.codec import decode_outcome
from flink_agents.runtime.execution.run import Run

__all__ = ["AGENT_PREFIX", "CHAT_PREFIX", "count_replayed", "count_sub_agent", "count_tokens"]

CHAT_PREFIX = "chat:"  # the function id of a built-in model call: chat:<setup resource>
AGENT_PREFIX = "agent:"  # the function id of a sub-agent call: agent:<resource>


def count_tokens(action_group: MetricGroup, model: Any, resource: str, reply: Any) -> Optional[Tuple[str, int, int]]:
    """Add ``reply``'s usage to ``action.<a>.model.<m>.promptTokens`` and
    ``.completionTokens`` under ``action_group``; ``m`` is the provider's
    model name, else ``model`` (the setup's), else ``resource``.

    Returns:
        ``(m, prompt tokens, completion tokens)`` counted; None (nothing
        counted) when the provider reported no usage.
    """
    extra = getattr(reply, "extra_args", None) or {}
    usage = extra.get("usage") if isinstance(extra.get("usage"), dict) else {}
    prompt = usage.get("prompt_tokens", extra.get("promptTokens"))
    completion = usage.get("completion_tokens", extra.get("completionTokens"))
    if prompt is None and completion is None:
        return None
    name = str(extra.get("model_name") or model or resource)
    _add(action_group, name, int(prompt or 0), int(completion or 0))
    return name, int(prompt or 0), int(completion or 0)


def _add(action_group: MetricGroup, model: str, prompt: int, completion: int) -> None:
    group = action_group.get_sub_group("model", model)
    group.get_counter("promptTokens").inc(prompt)
    group.get_counter("completionTokens").inc(completion)


def count_sub_agent(run: Run, position: Tuple[str, int], outcome: Any, ran: bool) -> None:
    """Count, once per run, the tokens a sub-agent call's child counted
    (``outcome["tokens"]``, journaled with its result; an outcome written
    without them counts nothing) into ``run.tokens``, and into the metrics
    when the child did not run here (``ran`` False: its result came from
    the journal), under the child's actions.

    Raises:
        ValueError: ``outcome["tokens"]`` is not a list of ``[action,
            model, prompt, completion]``.
    """
    if position in run.counted:
        return
    run.counted.add(position)
    tokens = outcome.get("tokens") if isinstance(outcome, dict) else None
    for entry in tokens or []:
        if not (isinstance(entry, list) and len(entry) == 4 and all(isinstance(v, str) for v in entry[:2])
                and all(isinstance(v, int) for v in entry[2:])):
            raise ValueError(f"sub-agent call at {position[0]}#{position[1]}: journaled tokens entry {entry!r:.120} "
                             "is not [action, model, prompt, completion]")
        action, model, prompt, completion = entry
        if not ran:
            _add(run.counters.metrics.builtin.action_group(action), model, prompt, completion)
        run.tokens.append(list(entry))


def count_replayed(run: Run) -> None:
    """Count the built-in model calls and sub-agent calls of ``run``'s
    journal not counted yet (those of steps replayed from their
    completion), under the action of their step (``"<action>@<n>[/<branch>]"``).
    Errors and entries of framework turns (not ``ChatMessage`` replies)
    count nothing."""
    setups = run.plan.resources.get(ResourceType.CHAT_MODEL, {})
    for entry in run.journal.journaled_entries():
        position = (entry.step, entry.ordinal)
        function_id = entry.function_id
        if position in run.counted:
            continue
        if function_id.startswith(AGENT_PREFIX):
            if "error" not in json.loads(entry.payload):
                count_sub_agent(run, position, decode_outcome(entry.payload), ran=False)
            continue
        resource = function_id[len(CHAT_PREFIX):]
        if not function_id.startswith(CHAT_PREFIX) or resource not in setups:
            continue
        run.counted.add(position)
        if "error" in json.loads(entry.payload):
            continue  # a failed call reported no usage
        reply = decode_outcome(entry.payload)
        if isinstance(reply, ChatMessage):
            setup = run.resources(resource, ResourceType.CHAT_MODEL)
            action = entry.step.split("@", 1)[0]
            counted = count_tokens(run.counters.metrics.builtin.action_group(action),
                                   getattr(setup, "model", None), resource, reply)
            if counted:
                run.tokens.append([action, *counted])

