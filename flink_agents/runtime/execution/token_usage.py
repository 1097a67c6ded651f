"""Model-call usage in the metrics, counted once per model call in the
engine that runs the record (docs/durability.md, "Usage").

Every model call is a journal entry ``chat:<name>``: a built-in chat call
(``chat:<setup resource>``, its reply a ``ChatMessage`` whose
``extra_args`` carry the provider's usage) or an agent framework's model
request (``chat:<framework>/<agent>``, the stored request carrying
``usage`` and ``model``: ``integrations.frameworks.durable_turn``). Both
read through one function, ``runtime.execution.usage.usage_of_reply``, so
the usage is journaled with the reply and read back the same on a replay.

A call is counted when its reply reaches the action, run or replayed
(``ActionContext.journaled_call``'s ``count``, ``journaled_call_at``'s
``count_usage``); the calls of steps a replay does not run again (their
completion journaled) are counted from the journal when the record's run
ends, however it ends: done, skipped or failed (``count_replayed``).
``Run.counted`` holds the positions counted, so no call counts twice in
one run (a retried action replays its failed attempt's calls without
counting them again).

Metrics, under ``action.<a>.model.<m>`` (``m`` the response's model name,
else the setup's ``model``, else the resource or ``<framework>/<agent>``):
``promptTokens``, ``completionTokens`` (Flink Agents 0.3.1's names: every
input token, cached ones included; every output token, reasoning ones
included), ``cachedTokens`` and ``reasoningTokens`` (when the provider
reports them) and ``costMicroUsd`` (with a price for ``m`` in
``usage.prices``: the cost so far in micro-USD, rounded from the exact sum).

A sub-agent call journals, with its result, the tokens its child's run
counted (``Run.tokens``: ``[action, model, prompt, completion[, cached,
reasoning]]`` each, the last two only when reported, grandchildren
included: ``tokens_entry``); a replay that returns the result without running
the child counts them (``count_sub_agent``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping  # not typing.Mapping: an isinstance check through typing costs a few us
from typing import Any, List, Optional, Tuple

from flink_agents.api.core_options import RuntimeOptions
from flink_agents.api.resource import ResourceType
from flink_agents.runtime.durability.codec import decode_outcome
from flink_agents.runtime.execution.run import Run
from flink_agents.runtime.execution.usage import PriceTable, Usage, model_call_usage, usage_of_reply

__all__ = [
    "AGENT_PREFIX", "CHAT_PREFIX", "count_model_call", "count_replayed", "count_sub_agent", "count_tokens",
    "prices_of", "run_totals", "sub_agent_tokens", "tokens_entry",
]

CHAT_PREFIX = "chat:"  # the function id of a model call: chat:<setup resource> or chat:<framework>/<agent>
AGENT_PREFIX = "agent:"  # the function id of a sub-agent call: agent:<resource>


def prices_of(run: Run) -> PriceTable:
    """The run's price table: ``run.prices`` (the engine's, built once),
    else built from ``run.config``'s ``usage.prices`` and kept on the run."""
    if run.prices is None:
        run.prices = PriceTable(run.config.get(RuntimeOptions.USAGE_PRICES))
    return run.prices


def count_model_call(run: Run, action: str, position: Tuple[str, int], reply: Any, fallback_model: str) -> None:
    """Count one model call's usage, once per run (``run.counted``), in the
    metrics (module docstring) and in ``run.tokens``.

    Args:
        action: The action that made the call (its metric group).
        position: ``(step, ordinal)`` of the call's journal entry.
        reply: The reply as journaled: a ``ChatMessage``, or a framework
            request's stored dict (plain JSON).
        fallback_model: The model name when the reply names none.
    """
    if position in run.counted:
        return
    run.counted.add(position)
    model, usage = usage_of_reply(_plain(reply))
    if usage is None:
        return  # the provider reported no usage
    name = model or fallback_model
    _add(run, action, name, usage)
    run.tokens.append(tokens_entry(action, name, usage))


def count_tokens(run: Run, action: str, position: Tuple[str, int], setup: Any, resource: str, reply: Any) -> None:
    """``count_model_call`` of a built-in chat call: the model name falls
    back to the setup's ``model``, then to ``resource``."""
    count_model_call(run, action, position, reply, str(getattr(setup, "model", None) or resource))


def _plain(reply: Any) -> Mapping[str, Any]:
    """What ``usage_of_reply`` reads of a reply: a stored dict itself, a
    ``ChatMessage``'s ``extra_args``."""
    if isinstance(reply, Mapping):
        return reply
    extra = getattr(reply, "extra_args", None)
    return {"extra_args": extra} if isinstance(extra, Mapping) else {}


def _add(run: Run, action: str, model: str, usage: Usage) -> None:
    cost = prices_of(run).cost(model, usage)
    run.counters.metrics.builtin.model_usage(action, model, usage, cost)


def count_sub_agent(run: Run, position: Tuple[str, int], outcome: Any, ran: bool) -> None:
    """Count, once per run, the tokens a sub-agent call's child counted
    (``outcome["tokens"]``, journaled with its result; an outcome written
    without them counts nothing) into ``run.tokens``, and into the metrics
    when the child did not run here (``ran`` False: its result came from
    the journal), under the child's actions.

    Raises:
        ValueError: ``outcome["tokens"]`` is not a list of ``[action,
            model, prompt, completion[, cached, reasoning]]``.
    """
    if position in run.counted:
        return
    run.counted.add(position)
    for action, model, usage in sub_agent_tokens(outcome, f"{position[0]}#{position[1]}"):
        if not ran:
            _add(run, action, model, usage)
        run.tokens.append(tokens_entry(action, model, usage))


def run_totals(run: Run) -> Tuple[Optional[Usage], Optional[float]]:
    """The run's usage and cost, summed over ``run.tokens`` (each model call
    once, its sub-agents' included); None where nothing was reported or
    priced."""
    if not run.tokens:  # a run without model calls (most records of most jobs)
        return None, None
    total: Optional[Usage] = None
    cost: Optional[float] = None
    prices = prices_of(run)
    for entry in run.tokens:
        usage = Usage(entry[2], entry[3], *(entry[4:6] if len(entry) == 6 else (None, None)))
        total = usage if total is None else total + usage
        call_cost = prices.cost(entry[1], usage)
        if call_cost is not None:
            cost = call_cost if cost is None else cost + call_cost
    return total, cost


def tokens_entry(action: str, model: str, usage: Usage) -> List[Any]:
    """One ``Run.tokens`` entry: ``[action, model, prompt, completion]``,
    with ``cached, reasoning`` after them only when either was reported
    (entries without them read as earlier releases wrote them)."""
    entry: List[Any] = [action, model, usage.input_tokens, usage.output_tokens]
    if usage.cached_input_tokens is not None or usage.reasoning_tokens is not None:
        entry += [usage.cached_input_tokens, usage.reasoning_tokens]
    return entry


def sub_agent_tokens(outcome: Any, where: str) -> List[Tuple[str, str, Usage]]:
    """``(action, model, usage)`` of each entry of a sub-agent outcome's
    journaled ``tokens``.

    Raises:
        ValueError: An entry is not ``[action, model, prompt, completion[,
            cached, reasoning]]`` (``where`` names the call).
    """
    tokens = outcome.get("tokens") if isinstance(outcome, dict) else None
    found = []
    for entry in tokens or []:
        if not (isinstance(entry, list) and len(entry) in (4, 6) and all(isinstance(v, str) for v in entry[:2])
                and all(_count(v) for v in entry[2:4])
                and all(v is None or _count(v) for v in entry[4:])):
            raise ValueError(f"sub-agent call at {where}: journaled tokens entry {entry!r:.120} "
                             "is not [action, model, prompt, completion, cached, reasoning]")
        cached, reasoning = (entry[4], entry[5]) if len(entry) == 6 else (None, None)
        found.append((entry[0], entry[1], Usage(entry[2], entry[3], cached, reasoning)))
    return found


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def count_replayed(run: Run) -> None:
    """Count the model calls (built-in or a framework's) and sub-agent
    calls of ``run``'s journal not counted yet (those of steps replayed
    from their completion), under the action of their step
    (``"<action>@<n>[/<branch>]"``). Failed calls count nothing."""
    entries = run.journal.journaled_entries()
    if not entries:
        return
    setups = run.plan.resources.get(ResourceType.CHAT_MODEL, {})
    for entry in entries:
        position = (entry.step, entry.ordinal)
        function_id = entry.function_id
        if position in run.counted:
            continue
        if function_id.startswith(AGENT_PREFIX):
            if "error" not in json.loads(entry.payload):
                count_sub_agent(run, position, decode_outcome(entry.payload), ran=False)
            continue
        if not function_id.startswith(CHAT_PREFIX):
            continue
        name = function_id[len(CHAT_PREFIX):]
        run.counted.add(position)
        model, usage = model_call_usage(function_id, entry.payload)
        if usage is None:
            continue  # failed, or no usage reported
        if model is None:
            model = _setup_model(run, name) if name in setups else None
        action = entry.step.split("@", 1)[0]
        _add(run, action, model or name, usage)
        run.tokens.append(tokens_entry(action, model or name, usage))


def _setup_model(run: Run, resource: str) -> Optional[str]:
    model = getattr(run.resources(resource, ResourceType.CHAT_MODEL), "model", None)
    return str(model) if model else None
