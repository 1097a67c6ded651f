"""Sub-agents on the mini-cluster: the review triage job, whose agent calls
child agents, gives on Flink what it gives on the local runner (the rest is
tests/engine/test_sub_agents.py)."""

from __future__ import annotations

import pytest


@pytest.mark.timeout(300)
def test_the_triage_job_with_sub_agents_on_the_mini_cluster_matches_the_local_runner(shared_reviews_path, tmp_path):
    from flink_agents.jobs.review_analysis import run_locally, run_on_flink
    from flink_agents.jobs.review_records import read_reviews
    from flink_agents.jobs.review_triage import ReviewTriageAgent

    reviews = read_reviews(shared_reviews_path).reviews[:600]
    on_flink = run_on_flink(reviews, ReviewTriageAgent(), parallelism=2, journal_path=tmp_path / "journal.db")
    local = run_locally(reviews, ReviewTriageAgent())
    key = lambda o: (o["id"], o["ts"])  # noqa: E731
    assert sorted(on_flink, key=key) == sorted(local, key=key)
    negative = [o for o in on_flink if o["negative"]]
    assert negative, "the sample has negative reviews"
    assert all(o["children_ok"] and o["reply"] and o["category"] for o in negative)
    positive = [o for o in on_flink if not o["negative"]]
    assert positive, "the sample has reviews that are not negative"
    assert all(o["reply"] is None for o in positive)
