"""``codec.round_trip`` copies plain JSON in one pass and gives exactly what
``decode(encode(value))`` gives for everything else (what an admitted input
record is: the run sees what a restore reads back)."""

from __future__ import annotations

import math
from decimal import Decimal
from http import HTTPStatus

import pytest

from flink_agents.runtime.durability.codec import EncodeError, decode, encode, round_trip


VALUES = [
    {"id": "P1", "review": "fine", "ts": 3, "score": 4.5, "ok": True, "tags": ["a", None], "nested": {"x": [1, {}]}},
    [1, "two", 3.0, False, None, []],
    {"$odd": 1, "plain": 2},
    (1, 2),
    {"status": HTTPStatus.OK},
    {"price": Decimal("1.10")},
    {1: "int key"},
    float("inf"),
    10**700,
    {"set": {1, 2}},
]


@pytest.mark.parametrize("value", VALUES, ids=[f"v{i}" for i in range(len(VALUES))])
def test_round_trip_is_decode_of_encode(value) -> None:
    expected = decode(encode(value))
    got = round_trip(value)
    assert type(got) is type(expected)
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected and repr(got) == repr(expected)


def test_a_plain_record_is_a_copy_not_the_callers_object() -> None:
    record = {"items": [{"n": 1}]}
    copied = round_trip(record)
    assert copied == record and copied is not record and copied["items"][0] is not record["items"][0]


def test_values_the_codec_refuses_still_fail_naming_the_path() -> None:
    with pytest.raises(EncodeError, match=r"record\.items\[1\]"):
        round_trip({"items": [1, object()]}, "record")
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(EncodeError, match="nested too deeply"):
        round_trip(deep, "record")
