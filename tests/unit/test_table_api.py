"""The Table API's output conversion (``runtime.flink.table.OutputConverter``),
without a cluster: what an agent may send as the output of a table, and the
error a misfit gets (the mini-cluster side is tests/e2e/test_table_api_e2e.py)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal

import pytest
from pydantic import BaseModel
from pyflink.common import Row, Types
from pyflink.common.typeinfo import BasicTypeInfo, ExternalTypeInfo, RowTypeInfo

from flink_agents.runtime.flink.output_conversion import OutputConverter, OutputTypeError

REVIEW = Types.ROW_NAMED(["id", "review", "score"], [Types.LONG(), Types.STRING(), Types.DOUBLE()])


class Scored(BaseModel):
    id: int
    review: str
    score: float


@dataclasses.dataclass
class ScoredRecord:
    score: float
    review: str
    id: int


def _fields(row: Row) -> dict:
    return row.as_dict(recursive=True)


@pytest.mark.parametrize(
    "output",
    [
        Row(id=7, review="fine", score=4.0),
        Row(score=4.0, review="fine", id=7),  # by name, not position
        {"review": "fine", "id": 7, "score": 4},  # an int widens to DOUBLE
        Scored(id=7, review="fine", score=4.0),
        ScoredRecord(score=4.0, review="fine", id=7),
        (7, "fine", 4.0),
        Row(7, "fine", 4.0),  # unnamed: by position
    ],
    ids=["row", "row-reordered", "dict", "pydantic", "dataclass", "tuple", "positional-row"],
)
def test_outputs_of_every_shape_become_the_named_row_of_the_type(output):
    converted = OutputConverter(REVIEW)("p1", output)

    assert isinstance(converted, Row)
    assert _fields(converted) == {"id": 7, "review": "fine", "score": 4.0}
    assert [type(v) for v in converted] == [int, str, float]


def test_nested_field_types_convert_by_their_own_type_info():
    """0.3.1's documented form: ``ExternalTypeInfo(RowTypeInfo(...))``, with
    nested rows, lists, maps, dates and decimals."""
    output_type = ExternalTypeInfo(RowTypeInfo(
        [
            BasicTypeInfo.STRING_TYPE_INFO(),
            Types.ROW_NAMED(["city", "zip"], [Types.STRING(), Types.INT()]),
            Types.LIST(Types.STRING()),
            Types.MAP(Types.STRING(), Types.LONG()),
            Types.SQL_DATE(),
            Types.BIG_DEC(),
        ],
        ["id", "address", "tags", "counts", "day", "amount"],
    ))
    output = {
        "id": "p1",
        "address": {"city": "Oslo", "zip": 150},
        "tags": ("a", None),
        "counts": {"x": 1},
        "day": datetime.date(2026, 11, 30),
        "amount": decimal.Decimal("1.50"),
    }

    converted = OutputConverter(output_type)("p1", output)

    assert converted.address == Row(city="Oslo", zip=150)
    assert converted.address.as_dict() == {"city": "Oslo", "zip": 150}
    assert converted.tags == ["a", None]
    assert (converted.counts, converted.day, converted.amount) == ({"x": 1}, datetime.date(2026, 11, 30), decimal.Decimal("1.50"))


@pytest.mark.parametrize(
    "output, path, shown",
    [
        ({"id": 7, "review": 5, "score": 1.0}, "review", "is 5 (int), expected a str (STRING)"),
        ({"id": "7", "review": "x", "score": 1.0}, "id", "is '7' (str), expected an int (LONG)"),
        ({"id": True, "review": "x", "score": 1.0}, "id", "is True (bool), expected an int (LONG)"),
        ({"id": 2**63, "review": "x", "score": 1.0}, "id", "expected an int in the range of LONG (64 bits)"),
        ({"id": 7, "review": "x"}, "", "expected the fields ['id', 'review', 'score'] (missing ['score'])"),
        ({"id": 7, "review": "x", "score": 1.0, "mood": "ok"}, "", "(not in the type ['mood'])"),
        ((7, "x"), "", "expected 3 fields ['id', 'review', 'score'], not 2 positional values"),
        ("7,x,1.0", "", "is '7,x,1.0' (str), expected a Row, mapping, pydantic model, dataclass or tuple"),
        (None, "", "is None (NoneType), expected a value (not None)"),
    ],
    ids=["str-field", "int-field", "bool-is-no-int", "out-of-range", "missing", "extra", "arity", "not-a-row", "none"],
)
def test_an_output_that_does_not_fit_names_the_key_the_field_and_the_value(output, path, shown):
    with pytest.raises(OutputTypeError) as raised:
        OutputConverter(REVIEW)("product-9", output)

    message = str(raised.value)
    assert message.startswith("output of key 'product-9' does not fit the output type RowTypeInfo(id: Long, ")
    assert (f"field {path!r}" if path else "the output") in message
    assert shown in message
    assert (raised.value.key, raised.value.path) == ("product-9", path)


def test_a_nested_misfit_names_its_path():
    output_type = Types.ROW_NAMED(
        ["id", "items"], [Types.STRING(), Types.LIST(Types.ROW_NAMED(["sku", "qty"], [Types.STRING(), Types.INT()]))]
    )
    output = {"id": "o1", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 1.5}]}

    with pytest.raises(OutputTypeError, match=r"field 'items\[1\]\.qty' is 1\.5 \(float\), expected an int \(INT\)"):
        OutputConverter(output_type)("o1", output)


def test_pickled_output_types_take_any_value_and_a_non_type_is_refused():
    anything = {"not": ["a", "row"]}

    assert OutputConverter(Types.PICKLED_BYTE_ARRAY())("k", anything) is anything
    with pytest.raises(TypeError, match="output_type must be a pyflink TypeInformation"):
        OutputConverter({"id": Types.LONG()})


def test_the_operator_converts_outputs_under_their_key_and_passes_side_outputs(monkeypatch):
    """``to_table``'s operator: each output is converted in the callback of
    its key (so a misfit names that key); error and progress records pass."""
    from flink_agents.api.agents.agent import Agent
    from flink_agents.api.decorators import action
    from flink_agents.api.events.event import InputEvent, OutputEvent
    from flink_agents.plan.agent_plan import AgentPlan
    from flink_agents.runtime.flink.operator import ERROR_OUTPUT, AgentOperatorFunction
    from flink_agents.runtime.flink.table import ConvertingOperatorFunction

    class Echo(Agent):
        @action(InputEvent)
        @staticmethod
        def echo(event: InputEvent, ctx) -> None:
            ctx.send_event(OutputEvent(output=event.input))

    applied = {
        "good": [(ERROR_OUTPUT, {"key": "good", "error_type": "ValueError"}), {"id": 1, "review": "ok", "score": 2}],
        "bad": [{"id": 1, "review": "ok", "score": "high"}],
    }
    monkeypatch.setattr(AgentOperatorFunction, "_emitted", lambda self, key: iter(applied[key]))
    function = ConvertingOperatorFunction(AgentPlan.from_agent(Echo()), {}, "job", OutputConverter(REVIEW))

    error, row = list(function._emitted("good"))
    with pytest.raises(OutputTypeError, match=r"output of key 'bad' .* field 'score' is 'high' \(str\)"):
        list(function._emitted("bad"))

    assert error == applied["good"][0]
    assert _fields(row) == {"id": 1, "review": "ok", "score": 2.0}
