"""Filling prompt placeholders (``api.prompts.utils``), as Flink Agents 0.3.1
does: a template is parsed once and filled anew at each call."""

from __future__ import annotations

import pytest

from flink_agents.api.prompts.utils import SafeFormatter, format_string

TEMPLATE = 'Rate {product} for {customer}. Answer {"score": <1-5>} and keep {unknown}.'


def test_the_same_template_is_filled_with_each_calls_values() -> None:
    assert format_string(TEMPLATE, product="boots", customer="Ada") == \
        'Rate boots for Ada. Answer {"score": <1-5>} and keep {unknown}.'
    assert format_string(TEMPLATE, product="tent", customer=7) == \
        'Rate tent for 7. Answer {"score": <1-5>} and keep {unknown}.'
    assert SafeFormatter({"unknown": None}).format(TEMPLATE) == \
        'Rate {product} for {customer}. Answer {"score": <1-5>} and keep None.'


def test_text_without_values_for_its_placeholders_stays_as_written() -> None:
    assert format_string(TEMPLATE) == TEMPLATE
    assert format_string(TEMPLATE, other="x") == TEMPLATE
    assert format_string("no placeholders", product="boots") == "no placeholders"
    assert format_string("{{product}}", product="boots") == "{boots}"  # 0.3.1: the innermost braces


def test_a_template_that_is_not_text_is_refused() -> None:
    with pytest.raises(TypeError, match="as a str, got int"):
        format_string(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="as a str, got bytes"):
        SafeFormatter({}).format(b"{x}")  # type: ignore[arg-type]
