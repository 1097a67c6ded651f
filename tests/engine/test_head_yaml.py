"""YAML agents written for Flink Agents HEAD: ``trigger_conditions`` beside
0.3.1's ``listen_to`` and tools with ``injected_args``, built and run on the
engine; mistakes reported with file, line and key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

import pytest

from flink_agents.api.events.event import Event, OutputEvent
from flink_agents.api.resource import ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.api.tools.function_tool import FunctionTool
from flink_agents.api.yaml.loader import YamlAgentError, build_agents
from flink_agents.stores.memory_store import InMemoryJournalStore
from tests.support.engine_runs import run_record


def label(event: Event, ctx: RunnerContext) -> None:
    ctx.send_event(OutputEvent(output=f"urgent:{event.input['id']}"))


def every(event: Event, ctx: RunnerContext) -> None:
    ctx.send_event(OutputEvent(output=f"seen:{event.input['id']}"))


def charge(amount: int, tenant: str) -> str:
    """Charge an amount.

    Args:
        amount: Cents.
    """
    return f"{tenant}:{amount}"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


AGENT = """\
agents:
  - name: triage
    actions:
      - name: every
        function: tests.engine.test_head_yaml:every
        listen_to: [input]
      - name: label
        function: tests.engine.test_head_yaml:label
        trigger_conditions:
          - "type == EventType.InputEvent && input.urgent == true"
    tools:
      - name: charge
        function: tests.engine.test_head_yaml:charge
        injected_args:
          tenant: {source: config, key: billing.tenant}
"""


def _outputs(driver: Any) -> List[Any]:
    return [v for out in driver.outputs for v in out.values()]


def test_trigger_conditions_and_listen_to_both_route(tmp_path: Path) -> None:
    agents, _, _ = build_agents(_write(tmp_path / "a.yaml", AGENT))
    store = InMemoryJournalStore()
    assert _outputs(run_record(agents["triage"], store, {"id": 1, "urgent": True})) == ["seen:1", "urgent:1"]
    assert _outputs(run_record(agents["triage"], store, {"id": 2, "urgent": False}, key="b")) == ["seen:2"]


def test_a_yaml_tool_hides_its_injected_parameters(tmp_path: Path) -> None:
    agents, _, _ = build_agents(_write(tmp_path / "a.yaml", AGENT))
    tool = agents["triage"].resources[ResourceType.TOOL]["charge"]
    assert isinstance(tool, FunctionTool)
    assert set(tool.metadata.args_schema["properties"]) == {"amount"}
    assert tool.injected_args["tenant"].key == "billing.tenant"


@pytest.mark.parametrize(
    ("actions", "where", "complaint"),
    [
        ("listen_to: [input]\n        trigger_conditions: [input]", "a.yaml:4: agents[0].actions[0]", "exactly one of listen_to"),
        ("trigger_conditions: ['type == EventType.Nope']", "trigger_conditions[0]", "unknown event type constant"),
        ("trigger_conditions: ['  ']", "actions[0].trigger_conditions[0]", "String should match pattern"),
    ],
)
def test_a_bad_trigger_list_is_reported_with_its_place(tmp_path: Path, actions: str, where: str, complaint: str) -> None:
    text = f"""\
agents:
  - name: triage
    actions:
      - name: label
        function: tests.engine.test_head_yaml:label
        {actions}
"""
    with pytest.raises(YamlAgentError) as caught:
        build_agents(_write(tmp_path / "a.yaml", text))
    assert where in str(caught.value) and complaint in str(caught.value)
