"""Token usage and cost of model calls, read from the journal.

One shape for every model call, native or made inside an agent framework
(``integrations.frameworks``): ``Usage(input_tokens, output_tokens,
cached_input_tokens, reasoning_tokens)``, the OpenTelemetry GenAI semantic
conventions' split (``gen_ai.usage.input_tokens``, ``.output_tokens``,
``.cache_read.input_tokens``, ``.reasoning.output_tokens``).
``input_tokens`` counts every prompt token, cached ones included, and
``output_tokens`` every completion token, reasoning ones included, as
OpenAI reports them (Anthropic reports cache reads beside its
``input_tokens``: its connection adds them in).

Where usage comes from, always the journaled reply, so a replay reads what
the first run read and nothing is counted twice:

- a built-in chat call (``chat:<setup>``): the reply's ``extra_args``
  (``usage: {prompt_tokens, completion_tokens, cached_tokens,
  reasoning_tokens}``, or 0.3.1's ``promptTokens``/``completionTokens``),
  model name ``extra_args.model_name``;
- a framework's model request (``chat:<framework>/<agent>``): the
  ``usage`` and ``model`` the turn journaled beside the framework's own
  response (``DurableTurn.model_request``).

Cost: an optional price table in the ``agent:`` config, USD per million
tokens per model (``usage.prices``, ``RuntimeOptions.USAGE_PRICES``)::

    usage.prices:
      gpt-4o-mini: {input: 0.15, cached_input: 0.075, output: 0.60}

Cached input tokens cost ``cached_input`` (default ``input``), the rest of
the input ``input``, output (reasoning included) ``output``. A model with
no price has no cost (None), never 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Mapping  # not typing.Mapping: an isinstance check through typing costs a few us
from typing import Any, Dict, Optional, Tuple

from flink_agents.api._prices import parse_prices

__all__ = ["PriceTable", "Usage", "add_to_totals", "model_call_usage", "usage_of_reply"]


@dataclass(frozen=True)
class Usage:
    """Tokens one or more model calls used (counts, never negative).

    ``cached_input_tokens`` and ``reasoning_tokens`` are None when no call
    reported them (a provider that does not say is not a provider that
    used none).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: Optional[int] = None
    reasoning_tokens: Optional[int] = None

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            _add_optional(self.cached_input_tokens, other.cached_input_tokens),
            _add_optional(self.reasoning_tokens, other.reasoning_tokens),
        )

    def as_dict(self) -> Dict[str, int]:
        """``{"input_tokens", "output_tokens"[, "cached_input_tokens"][, "reasoning_tokens"]}``."""
        fields = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}
        if self.cached_input_tokens is not None:
            fields["cached_input_tokens"] = self.cached_input_tokens
        if self.reasoning_tokens is not None:
            fields["reasoning_tokens"] = self.reasoning_tokens
        return fields

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Optional["Usage"]:
        """The usage ``as_dict`` wrote, or a provider's ``prompt_tokens`` /
        ``completion_tokens`` / ``cached_tokens`` / ``reasoning_tokens``
        (0.3.1's ``promptTokens`` / ``completionTokens`` too); None when
        it holds no token count. Non-integer counts are ignored (the data
        is read back from the journal: untrusted)."""
        def count(*names: str) -> Optional[int]:
            for name in names:
                value = data.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    return value
            return None

        given = count("input_tokens", "prompt_tokens", "promptTokens")
        taken = count("output_tokens", "completion_tokens", "completionTokens")
        if given is None and taken is None:
            return None
        return cls(given or 0, taken or 0, count("cached_input_tokens", "cached_tokens"), count("reasoning_tokens"))


def _add_optional(a: Optional[int], b: Optional[int]) -> Optional[int]:
    return b if a is None else a if b is None else a + b


def usage_of_reply(reply: Mapping[str, Any]) -> Tuple[Optional[str], Optional[Usage]]:
    """``(response model, usage)`` of one journaled model reply as plain JSON
    (``codec.plain_json`` of a ``ChatMessage``, or a framework turn's
    stored request); ``(None, None)`` parts where it reports none."""
    extra = reply.get("extra_args")
    if isinstance(extra, Mapping):  # a built-in chat call's ChatMessage
        usage = extra.get("usage") if isinstance(extra.get("usage"), Mapping) else extra
        model = extra.get("model_name")
        return (model if isinstance(model, str) else None), Usage.from_dict(usage)
    usage = reply.get("usage")
    model = reply.get("model")
    return (model if isinstance(model, str) else None), (Usage.from_dict(usage) if isinstance(usage, Mapping) else None)


def model_call_usage(function_id: str, payload: str) -> Tuple[Optional[str], Optional[Usage]]:
    """``(response model, usage)`` of a journal entry's payload when it is a
    successful model call (``chat:...``); ``(None, None)`` otherwise."""
    if not function_id.startswith("chat:"):
        return None, None
    from flink_agents.runtime.durability.codec import plain_json

    data = json.loads(payload)
    reply = plain_json(data.get("ok")) if "ok" in data else None
    return usage_of_reply(reply) if isinstance(reply, Mapping) else (None, None)


class PriceTable:
    """USD per million tokens per model (module docstring).

    Args:
        prices: ``{model: {"input": x, "output": y[, "cached_input": z]}}``
            (or its flattened form: ``flink_agents.api._prices``).

    Raises:
        ValueError: A model's prices are not a mapping of those names to
            non-negative numbers (names the model and field).
    """

    def __init__(self, prices: Mapping[str, Any] | None) -> None:
        self._prices: Dict[str, Tuple[float, float, float]] = parse_prices(prices)

    def __bool__(self) -> bool:
        return bool(self._prices)

    def cost(self, model: Optional[str], usage: Optional[Usage]) -> Optional[float]:
        """The cost of ``usage`` on ``model`` in USD; None without a price
        for the model (looked up by the response's model name, then the
        name without a ``-YYYY-MM-DD`` style date suffix) or without usage."""
        if usage is None or model is None:
            return None
        rates = self._prices.get(model) or self._prices.get(_undated(model))
        if rates is None:
            return None
        input_rate, output_rate, cached_rate = rates
        cached = min(usage.cached_input_tokens or 0, usage.input_tokens)
        return ((usage.input_tokens - cached) * input_rate + cached * cached_rate
                + usage.output_tokens * output_rate) / 1e6


def _undated(model: str) -> str:
    """``gpt-4o-mini-2024-07-18`` -> ``gpt-4o-mini`` (providers answer with
    a dated snapshot of the model asked for)."""
    parts = model.rsplit("-", 3)
    if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
        return parts[0]
    return model


def add_to_totals(totals: Mapping[str, Any] | None, usage: Optional[Usage], cost: Optional[float]) -> Dict[str, Any]:
    """Running totals (a key's, in its keyed state) with one record's usage
    and cost added: ``{"records", "input_tokens", "output_tokens"[,
    "cached_input_tokens"][, "reasoning_tokens"][, "cost_usd"]}``, a new
    dict. Values that are not counts in ``totals`` (state read back:
    untrusted) count as absent."""
    previous = Usage.from_dict(totals or {})
    merged = (previous + usage) if previous is not None and usage is not None else (previous or usage)
    result: Dict[str, Any] = {"records": _count_of(totals, "records") + 1}
    if merged is not None:
        result.update(merged.as_dict())
    earlier = (totals or {}).get("cost_usd")
    earlier = float(earlier) if isinstance(earlier, (int, float)) and not isinstance(earlier, bool) else None
    if cost is not None or earlier is not None:
        result["cost_usd"] = (earlier or 0.0) + (cost or 0.0)
    return result


def _count_of(totals: Mapping[str, Any] | None, name: str) -> int:
    value = (totals or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
