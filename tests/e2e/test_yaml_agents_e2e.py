"""The ``run-yaml`` command on the mini-cluster: a YAML agent gives on Flink
what the code agent gives (the rest is tests/engine/test_yaml_agents.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine.test_yaml_agents import (  # noqa: F401  (review_yaml: the fixture)
    _by_review,
    _cli,
    _code_agent_outputs,
    _input_file,
    _reviews,
    review_yaml,
)


def test_run_yaml_command_on_the_mini_cluster(review_yaml: Path, tmp_path: Path) -> None:
    from tests.support.flink_jobs import child_environment

    reviews = _reviews(6)
    out = tmp_path / "analysis.jsonl"
    done = _cli(
        str(review_yaml), "--input", str(_input_file(tmp_path, reviews)), "--key", "id",
        "--runner", "flink", "--parallelism", "2", "--output", str(out),
        env=child_environment(), timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(outputs, key=_by_review) == sorted(_code_agent_outputs(reviews), key=_by_review)
