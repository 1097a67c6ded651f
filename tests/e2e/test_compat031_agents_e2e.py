"""Agents written as Flink Agents 0.3.1's documentation and examples write
them run unchanged on the mini-cluster, with the outputs 0.3.1 gives (the
local runner: tests/compat/test_compat031_agents.py; the agents are in
tests/support/compat031_agents.py)."""

from __future__ import annotations

import sys

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from tests.compat.test_compat031_agents import WORKFLOW_RECORDS
from tests.support.compat031_agents import SumAgent, UnifiedEventAgent, WorkflowAgent, sum_expected, workflow_expected
from tests.support.head_agents import ScoreLineageAgent


def test_the_same_agents_on_the_mini_cluster(tmp_path) -> None:
    """One Flink job, three agents applied to three keyed streams, and a
    fourth written for Flink Agents HEAD (a trigger condition expression,
    event lineage) on a fourth."""
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    config = Configuration()
    config.set_string("restart-strategy.type", "none")
    config.set_string("python.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(2)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    text = "calculate the sum of 1 and 2."
    workflow = agents_env.from_datastream(
        env.from_collection([r["value"] for r in WORKFLOW_RECORDS]), lambda r: r.split()[-1]
    ).apply(WorkflowAgent()).to_datastream()
    sums = agents_env.from_datastream(env.from_collection([text]), lambda r: "0001").apply(SumAgent()).to_datastream()
    unified = agents_env.from_datastream(
        env.from_collection([{"id": 1, "text": "great taste, fair price"}]), lambda r: r["id"]
    ).apply(UnifiedEventAgent()).to_datastream()
    head = agents_env.from_datastream(
        env.from_collection([{"id": 1, "score": 9}, {"id": 2, "score": 3}]), lambda r: r["id"]
    ).apply(ScoreLineageAgent()).to_datastream()
    with workflow.union(sums, unified, head).execute_and_collect("compat031") as collected:
        outputs = list(collected)

    assert [o for o in outputs if isinstance(o, dict) and "head" in o] == [{"head": 1, "from": "score", "lineage_ok": True}]
    outputs = [o for o in outputs if not (isinstance(o, dict) and "head" in o)]

    assert [o for o in outputs if isinstance(o, str)] == [sum_expected(text)]
    verdicts = sorted((o for o in outputs if isinstance(o, dict) and "verdict" in o), key=lambda o: o["aspect"])
    assert verdicts == [
        {"id": 1, "aspect": "price", "verdict": "mentioned"},
        {"id": 1, "aspect": "taste", "verdict": "mentioned"},
    ]
    # Keyed by the message's last word (bob/john); per key in order.
    visits = [o for o in outputs if isinstance(o, dict) and "verdict" not in o]
    expected = workflow_expected([{"key": r["value"].split()[-1], "value": r["value"]} for r in WORKFLOW_RECORDS])
    for key, wanted in expected.items():
        assert [o for o in visits if next(iter(o.values())).startswith(tuple(
            r["value"] for r in WORKFLOW_RECORDS if r["value"].split()[-1] == key))] == wanted
