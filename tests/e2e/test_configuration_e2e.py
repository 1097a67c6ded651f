"""Configuration on the Flink operator (the mini-cluster): options from
config.yaml's ``agent:`` section and from code reach the actions, code
winning (the rest is tests/engine/test_configuration.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.core_options import AgentConfigOptions, AgentExecutionOptions
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from tests.engine.test_configuration import _write_conf


@pytest.fixture(autouse=True)
def _no_flink_conf_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLINK_CONF_DIR", raising=False)


class ConfigEchoAgent(Agent):
    """Outputs what its action reads from ``ctx.config``; fails on value -1."""

    @staticmethod
    def on_input(event: InputEvent, ctx: Any) -> None:
        if event.input["x"] == -1:
            raise ValueError("poisoned record")
        ctx.send_event(OutputEvent(output={
            "x": event.input["x"],
            "job": ctx.config.get(AgentConfigOptions.JOB_IDENTIFIER),
            "retries": ctx.config.get(AgentExecutionOptions.MAX_RETRIES),
            "tenant": ctx.config.get_str("custom.tenant"),
        }))


def test_config_yaml_and_code_options_reach_the_flink_operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyflink.common import Configuration as FlinkConfiguration
    from pyflink.datastream import StreamExecutionEnvironment

    flink_config = FlinkConfiguration()
    flink_config.set_string("restart-strategy.type", "none")
    flink_config.set_string("python.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(flink_config)
    env.set_parallelism(1)
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    _write_conf(conf_dir, """
agent:
  error-handling-strategy: ignore
  max-retries: 1
  retry-wait-interval: 0
  job-identifier: from-file
  custom:
    tenant: acme
""")
    monkeypatch.setenv("FLINK_CONF_DIR", str(conf_dir))
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db"), "job_id": "from-code"}
    )
    agent = ConfigEchoAgent()
    agent.add_action("on_input", [InputEvent], ConfigEchoAgent.on_input)
    records = [{"k": "a", "x": 1}, {"k": "a", "x": -1}, {"k": "b", "x": 2}]
    builder = agents_env.from_datastream(env.from_collection(records), lambda r: r["k"]).apply(agent)
    outputs = builder.to_datastream().map(lambda o: ("output", o))
    errors = builder.error_stream().map(lambda e: ("error", e))
    with outputs.union(errors).execute_and_collect("configured") as collected:
        results = list(collected)

    assert sorted((o["x"], o["job"], o["retries"], o["tenant"]) for kind, o in results if kind == "output") == [
        (1, "from-code", 1, "acme"), (2, "from-code", 1, "acme"),
    ]
    # error-handling-strategy ignore with one retry, from the file: the
    # poisoned record ran twice, then went to the error side output.
    assert [(e["key"], e["error_message"], e["attempts"]) for kind, e in results if kind == "error"] == [
        ("a", "poisoned record", 2)
    ]
