"""plans/*.json are the compiled plans of the jobs' agents, kept current."""

from __future__ import annotations

from pathlib import Path

import pytest

from flink_agents.cli.main import SNAPSHOTS, compile_spec
from flink_agents.plan.agent_plan import AgentPlan

PLANS = Path(__file__).resolve().parents[2] / "plans"


@pytest.mark.parametrize("file_name", sorted(SNAPSHOTS))
def test_plan_snapshot_is_current(file_name: str) -> None:
    path = PLANS / file_name
    assert path.exists(), f"{path} is missing: run 'flink-agents plan write' from the repo root"
    assert path.read_text() == compile_spec(SNAPSHOTS[file_name]).to_json(), (
        f"{path} is stale: the agent changed; run 'flink-agents plan write' and review the diff"
    )


@pytest.mark.parametrize("file_name", sorted(SNAPSHOTS))
def test_plan_snapshot_reads_back_unchanged(file_name: str) -> None:
    text = (PLANS / file_name).read_text()
    assert AgentPlan.from_json(text).to_json() == text
