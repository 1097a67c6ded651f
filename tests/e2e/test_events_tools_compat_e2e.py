"""Rows through an agent on the mini-cluster come out equal, field names and
row kind included (the rest of the 0.3.1 events and tools: the local runner,
in tests/compat/test_events_tools_compat.py)."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
from pyflink.common import Row, RowKind

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from tests.compat.test_events_tools_compat import ROWS, RowAgent, _expected


@pytest.mark.timeout(300)
def test_rows_go_through_an_agent_on_the_mini_cluster_and_come_out_equal(tmp_path: Any) -> None:
    from pyflink.common import Types

    from tests.support.flink_jobs import mini_cluster_env

    env = mini_cluster_env(1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    rows = list(ROWS)
    source = env.from_collection(list(range(len(rows))), type_info=Types.INT()).map(
        lambda i: rows[i], output_type=Types.PICKLED_BYTE_ARRAY()
    )
    stream = agents_env.from_datastream(source, lambda r: r[0]).apply(RowAgent()).to_datastream(typed_outputs=True)
    with stream.execute_and_collect("rows") as collected:
        outputs = list(collected)

    grouped: Dict[str, List[Row]] = {}
    for output in outputs:
        grouped.setdefault(output.current[0], []).append(output)
    assert grouped == _expected()
    assert grouped["u2"][0].current.get_row_kind() == RowKind.UPDATE_AFTER
