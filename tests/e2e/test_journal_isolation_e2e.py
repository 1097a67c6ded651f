"""A failing journal store on the Flink runner (issue 27, section 4): the
job fails with the store's error as its one-line root cause (the local
runner and the job command: tests/engine/test_journal_isolation.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from tests.engine.test_journal_isolation import SAMPLE, refuse_writes


@pytest.mark.timeout(300)
def test_a_flink_job_with_a_failing_store_fails_naming_the_store_error(tmp_path: Path) -> None:
    """The Flink operator raises a failed record through the same step as
    the local runner: the job's one-line root cause is the store's error,
    not the internal ``JournalUnavailable``."""
    from pyflink.common import Types

    from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, product_id_of
    from flink_agents.runtime.flink.failures import FlinkJobFailed
    from tests.support.flink_jobs import mini_cluster_env

    journal = {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
    refuse_writes(journal, "quota exceeded for the journal", only_run_ends=True)
    env = mini_cluster_env(1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{**journal, "journal.retry.timeout_s": 0, "job-identifier": "reviews"}
    )
    lines = SAMPLE.read_text().splitlines()[:1]
    reviews = env.from_collection(lines, type_info=Types.STRING()).map(
        json.loads, output_type=Types.PICKLED_BYTE_ARRAY()
    )
    agents_env.from_datastream(reviews, product_id_of, key_type=Types.STRING()).apply(ReviewAnalysisAgent()) \
        .to_datastream().print()
    with pytest.raises(FlinkJobFailed) as failed:  # a Py4JJavaError
        agents_env.execute("failing-store")
    error = failed.value
    line = str(error)
    assert "\n" not in line, line[:3000]
    assert getattr(error, "cause_type") == "flink_agents.stores.errors.JournalStoreError", line[:3000]
    assert line.startswith("JournalStoreError: append of run (journal 'reviews', key "), line[:3000]
    assert journal["journal.sqlite.path"] in line and "quota exceeded for the journal" in line, line[:3000]
