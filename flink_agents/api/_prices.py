"""The price table's data (``usage.prices``), checked where the option is
declared (``api.core_options``) and read by the runtime's ``PriceTable``
(``runtime.execution.usage``): one reading of the format."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

__all__ = ["PRICE_FIELDS", "parse_prices"]

PRICE_FIELDS = ("input", "output", "cached_input")


def parse_prices(prices: Mapping[str, Any] | None) -> Dict[str, Tuple[float, float, float]]:
    """``{model: (input, output, cached_input)}`` in USD per million tokens.

    Args:
        prices: ``{model: {"input": x, "output": y[, "cached_input": z]}}``;
            also flat, as a nested mapping in the ``agent:`` config reads
            (``{"gpt-4o.input": x, "gpt-4o.output": y}``: the field is the
            last dotted part, so model names may hold dots). A missing
            ``input`` or ``output`` is 0; ``cached_input`` defaults to
            ``input``.

    Raises:
        ValueError: A model's prices are not a mapping of those names to
            numbers >= 0 (names the model and the field).
    """
    nested: Dict[str, Any] = {}
    for name, entry in (prices or {}).items():
        model, _, field = str(name).rpartition(".")
        if not isinstance(entry, Mapping) and model and field in PRICE_FIELDS:
            target = nested.setdefault(model, {})
            if isinstance(target, dict):
                target[field] = entry
                continue
        nested[str(name)] = entry
    table: Dict[str, Tuple[float, float, float]] = {}
    for model, entry in nested.items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"usage.prices[{model!r}] must map input/output/cached_input to USD per million "
                             f"tokens, got {entry!r:.80}")
        unknown = set(entry) - set(PRICE_FIELDS)
        if unknown:
            raise ValueError(f"usage.prices[{model!r}]: unknown field(s) {sorted(unknown)}; "
                             "expected input, output, cached_input")
        rates = []
        for field in PRICE_FIELDS:
            value = entry.get(field, entry.get("input", 0.0) if field == "cached_input" else 0.0)
            if isinstance(value, str):
                try:
                    value = float(value.strip())  # a YAML or env value written as text
                except ValueError:
                    pass
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"usage.prices[{model!r}].{field} must be a number >= 0 "
                                 f"(USD per million tokens), got {value!r}")
            rates.append(float(value))
        table[model] = (rates[0], rates[1], rates[2])
    return table
