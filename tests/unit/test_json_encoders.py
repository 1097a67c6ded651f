"""The runtime's JSON texts are json.dumps's, byte for byte: journals and
state already written hold digests of them and compare them."""

import json

import pytest

from flink_agents.runtime.durability.json_encoders import canonical_json, canonical_json_utf8, compact_json, compact_json_utf8

VALUES = [
    None, True, 0, -7, 2**70, 1.5, float("1e300"), "", "plain", "caf\u00e9 \u2603 \U0001f600", "\ud800",
    [], {}, [1, "a", None], {"b": 1, "a": [2, {"d": 4, "c": 3}]}, {"\u00e9": "x", "e": "y"},
    {"nested": [[[[]]]], "": ""},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_same_text_as_json_dumps(value):
    assert canonical_json(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))
    assert canonical_json_utf8(value) == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert compact_json(value) == json.dumps(value, separators=(",", ":"))
    assert compact_json_utf8(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_what_json_refuses_it_refuses():
    with pytest.raises(TypeError):
        canonical_json({"a": object()})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError):
        canonical_json(loop)
