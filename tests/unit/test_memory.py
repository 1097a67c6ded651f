"""Memory objects: dotted paths, references, JSON-like values, staging."""

from __future__ import annotations

from collections import Counter

import pytest

from flink_agents.api.memory_object import MemoryObject
from flink_agents.api.memory_reference import MemoryRef
from flink_agents.runtime.execution.memory import MemoryNode, StagedMemory


@pytest.fixture
def mem() -> MemoryObject:
    return MemoryNode(StagedMemory({}, "short_term_memory"))


def test_set_and_get_by_dotted_path(mem):
    mem.set("order.total", 12.5)
    mem.set("order.customer.name", "Ada")

    assert mem.get("order.total") == 12.5
    assert mem.get("order.customer.name") == "Ada"
    assert mem.get("order.missing") is None
    assert mem.get("nothing.at.all") is None


def test_set_creates_parent_objects(mem):
    mem.set("a.b.c", 1)

    a = mem.get("a")
    assert isinstance(a, MemoryObject)
    assert isinstance(mem.get("a.b"), MemoryObject)
    assert a.get("b.c") == 1
    assert mem.is_exist("a") and mem.is_exist("a.b") and mem.is_exist("a.b.c")
    assert not mem.is_exist("a.b.d")


def test_nested_object_reads_and_writes_relative_paths(mem):
    order = mem.new_object("order")
    order.set("id", "o-1")
    order.new_object("items").set("sku", "x")

    assert mem.get("order.id") == "o-1"
    assert mem.get("order.items.sku") == "x"
    assert order.get("items.sku") == "x"


def test_field_names_and_fields_are_direct_children_only(mem):
    mem.set("order.id", "o-1")
    mem.set("order.total", 3)
    mem.set("order.customer.name", "Ada")
    mem.set("count", 1)

    assert sorted(mem.get_field_names()) == ["count", "order"]
    order = mem.get("order")
    assert sorted(order.get_field_names()) == ["customer", "id", "total"]
    fields = order.get_fields()
    assert fields["id"] == "o-1" and fields["total"] == 3
    assert isinstance(fields["customer"], MemoryObject)
    assert fields["customer"].get("name") == "Ada"


def test_new_object_refuses_an_existing_path_unless_overwrite(mem):
    mem.set("o.old", 1)

    with pytest.raises(ValueError, match="'o' already exists"):
        mem.new_object("o")
    fresh = mem.new_object("o", overwrite=True)

    assert fresh.get_field_names() == []
    assert not mem.is_exist("o.old")


def test_memory_ref_round_trip(mem):
    ref = mem.set("a.b", [1, 2])
    nested_ref = mem.get("a").set("c", {"x": 1})

    assert ref == MemoryRef(path="a.b")
    assert nested_ref.path == "a.c"
    assert mem.get(ref) == [1, 2]
    assert mem.get(nested_ref) == {"x": 1}
    # A reference survives serialization (events carry them).
    assert mem.get(MemoryRef.model_validate_json(ref.model_dump_json())) == [1, 2]


def test_setting_under_a_value_parent_is_a_value_error(mem):
    mem.set("a", 5)

    with pytest.raises(ValueError, match=r"'a\.b'.*'a' holds a value"):
        mem.set("a.b", 1)
    with pytest.raises(ValueError, match="'a' holds a value"):
        mem.new_object("a.b")
    assert mem.get("a") == 5


@pytest.mark.parametrize(
    "value, where",
    [
        (object(), "short_term_memory.x.y is a builtins.object"),
        ({1, print}, r"short_term_memory.x.y\[\d\] is a builtins.builtin_function_or_method"),
        (bytearray(b"raw"), "short_term_memory.x.y is a builtins.bytearray"),
        ({"inner": [1, object()]}, r"short_term_memory.x.y.inner\[1\] is a builtins.object"),
        ({1: object()}, r"short_term_memory.x.y\[1\] is a builtins.object"),
        (Counter(a=1), "short_term_memory.x.y is a collections.Counter"),
    ],
)
def test_a_value_the_codec_cannot_carry_is_a_type_error_naming_the_path(mem, value, where):
    with pytest.raises(TypeError, match=where):
        mem.set("x.y", value)

    assert not mem.is_exist("x.y")


def test_mutating_a_returned_or_stored_value_does_not_change_memory(mem):
    original = [1, {"n": 2}]
    mem.set("xs", original)
    original.append(3)
    got = mem.get("xs")
    got.append(4)
    got[1]["n"] = 99

    assert mem.get("xs") == [1, {"n": 2}]


def test_overwriting_an_object_with_a_value_drops_its_children(mem):
    mem.set("o.a", 1)
    mem.set("o.b.c", 2)

    mem.set("o", "flat")

    assert mem.get("o") == "flat"
    assert not mem.is_exist("o.a")
    assert not mem.is_exist("o.b.c")
    assert mem.get_field_names() == ["o"]


def test_writes_are_staged_until_commit():
    base = {"kept": 1}
    staged = StagedMemory(base, "sensory_memory")
    node = MemoryNode(staged)

    node.set("new", 2)

    assert node.get("new") == 2  # the action sees its own write
    assert base == {"kept": 1}  # nobody else does yet
    assert staged.commit() == {"kept": 1, "new": 2}
