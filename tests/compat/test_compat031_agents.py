"""Agents written as Flink Agents 0.3.1's documentation and examples write
them run unchanged on the local runner (and on the mini-cluster:
tests/e2e/test_compat031_agents_e2e.py), with the outputs 0.3.1 gives
(tests/support/compat031_agents.py holds the agents)."""

from __future__ import annotations

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from tests.support.compat031_agents import (
    SumAgent,
    UnifiedEventAgent,
    WorkflowAgent,
    sum_expected,
    workflow_expected,
)

WORKFLOW_RECORDS = [
    {"key": "bob", "value": "The message from bob"},
    {"key": "john", "value": "The message from john"},
    {"key": "john", "value": "Second message from john"},
    {"key": "bob", "value": "Second message from bob"},
]


def _per_key(listed):
    grouped = {}
    for entry in listed:
        for key, output in entry.items():
            grouped.setdefault(key, []).append(output)
    return grouped


def test_workflow_agent_with_memory_refs_and_a_list_filled_after_from_list() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    records: list = []
    outputs = env.from_list(records).apply(WorkflowAgent()).to_list()
    # 0.3.1 code fills the list after from_list (and uses "k"/"v" or no key).
    records.extend(WORKFLOW_RECORDS[:1])
    records.append({"k": "john", "v": "The message from john"})
    records.extend(WORKFLOW_RECORDS[2:])
    records.append({"value": "Message from unknown"})
    env.execute()

    grouped = _per_key(outputs)
    expected = workflow_expected(WORKFLOW_RECORDS)
    assert {k: grouped[k] for k in expected} == expected
    (unknown_key,) = set(grouped) - set(expected)
    assert grouped[unknown_key] == [
        {"(visit 1 times)": "Message from unknown -> processed_by_first_action"},
        {"(visit 2 times)": "Message from unknown -> processed by second_action"},
    ]


def test_built_in_actions_with_a_setup_that_overrides_chat_and_a_uuid_tool_call_id() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    text = "calculate the sum of 1 and 2."
    outputs = env.from_list([{"key": "0001", "value": text}]).apply(SumAgent()).to_list()
    env.execute()
    assert outputs == [{"0001": sum_expected(text)}]


def test_unified_events_are_routed_by_their_type_string() -> None:
    env = AgentsExecutionEnvironment.get_execution_environment()
    outputs = env.from_list([
        {"key": "r1", "value": {"id": 1, "text": "great taste, fair price"}},
        {"key": "r2", "value": {"id": 2, "text": "the taste was off"}},
    ]).apply(UnifiedEventAgent()).to_list()
    env.execute()
    grouped = _per_key(outputs)
    assert sorted(grouped["r1"], key=lambda o: o["aspect"]) == [
        {"id": 1, "aspect": "price", "verdict": "mentioned"},
        {"id": 1, "aspect": "taste", "verdict": "mentioned"},
    ]
    assert sorted(grouped["r2"], key=lambda o: o["aspect"]) == [
        {"id": 2, "aspect": "price", "verdict": "absent"},
        {"id": 2, "aspect": "taste", "verdict": "mentioned"},
    ]
