"""``set`` returns a reference to the memory it wrote, which resolves there."""

from __future__ import annotations

from flink_agents.api.memory_object import MemoryType
from flink_agents.runtime.execution.memory import SENSORY_LABEL, MemoryNode, StagedMemory


def test_a_sensory_set_returns_a_sensory_reference_and_a_short_term_set_a_short_term_one() -> None:
    sensory = MemoryNode(StagedMemory({}, SENSORY_LABEL))
    short_term = MemoryNode(StagedMemory({}, "short_term_memory"))
    sensory_ref = sensory.set("draft", "a")
    short_ref = short_term.set("draft", "b")
    assert (sensory_ref.memory_type, sensory_ref.path) == (MemoryType.SENSORY, "draft")
    assert (short_ref.memory_type, short_ref.path) == (MemoryType.SHORT_TERM, "draft")
    assert sensory.get(sensory_ref) == "a" and short_term.get(short_ref) == "b"
    assert short_term.set("draft", "c") is short_ref  # frozen: shared, not rebuilt per set
