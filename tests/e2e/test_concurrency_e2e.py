"""Cross-key concurrency on one Flink subtask (the mini-cluster): keys
overlap their calls to a slow model, per-key order and the bound on runs in
flight hold, and the end of a bounded input waits for every key in flight
(the local runner's side is tests/engine/test_concurrency.py)."""

from __future__ import annotations

import sys
from typing import Any, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from tests.engine.test_concurrency import (  # noqa: F401  (slow_server: the fixture)
    _assert_in_flight_at_once,
    _assert_per_key_order,
    _records,
    slow_model_agent,
    slow_server,
)


def _run_on_flink(records: List[dict], agent: Agent, tmp_path, **config: Any) -> List[dict]:
    from pyflink.common import Configuration, Types
    from pyflink.datastream import StreamExecutionEnvironment

    flink_config = Configuration()
    flink_config.set_string("restart-strategy.type", "none")
    flink_config.set_string("python.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(flink_config)
    env.set_parallelism(1)  # one subtask: the overlap must come from the runtime
    env.enable_checkpointing(1_000)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db"), **config}
    )
    stream = agents_env.from_datastream(env.from_collection(records), lambda r: r["key"], key_type=Types.STRING())
    with stream.apply(agent).to_datastream().execute_and_collect("concurrency") as collected:
        return list(collected)


@pytest.mark.timeout(180)
def test_flink_subtask_overlaps_keys_and_waits_for_them_at_end_of_input(slow_server, tmp_path):
    slow_server.hold_until_in_flight(20)
    records = _records(keys=20, per_key=1)
    outputs = _run_on_flink(records, slow_model_agent(slow_server.base_url), tmp_path)
    _assert_per_key_order(records, outputs)
    _assert_in_flight_at_once(slow_server, 20)


@pytest.mark.timeout(180)
def test_flink_subtask_keeps_per_key_order_and_its_bound(slow_server, tmp_path):
    records = _records(keys=8, per_key=5)
    slow_server.hold_until_in_flight(4)
    outputs = _run_on_flink(records, slow_model_agent(slow_server.base_url), tmp_path, max_concurrent_runs=4)
    _assert_per_key_order(records, outputs)
    _assert_in_flight_at_once(slow_server, 4)
    assert len(slow_server.requests) == 40
