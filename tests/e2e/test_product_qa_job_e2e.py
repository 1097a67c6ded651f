"""The product-QA job on the Flink mini-cluster, over a slice of the shared
reviews (skipped when ../shared is not checked out beside the repo)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List

from flink_agents.jobs.product_qa import SHARED_QUESTIONS, ProductQAAgent, read_questions, run_locally, run_on_flink
from flink_agents.jobs.review_index import build_review_index, review_id
from flink_agents.jobs.review_records import read_reviews

PER_PRODUCT = 60  # reviews of each asked-about product in the slice


def _slice(shared_reviews_path: Path, products: set) -> List[Dict[str, Any]]:
    """The first PER_PRODUCT reviews of each product, in file order."""
    taken: Dict[str, int] = defaultdict(int)
    reviews = []
    for review in read_reviews(shared_reviews_path).reviews:
        if review["id"] in products and taken[review["id"]] < PER_PRODUCT:
            taken[review["id"]] += 1
            reviews.append(review)
    return reviews


def _check(questions: List[Dict[str, Any]], outputs: List[Dict[str, Any]], reviews: List[Dict[str, Any]]) -> None:
    """One output per question; it retrieved reviews of its product only
    (from the slice) and cites some of them."""
    by_question = {o["question_id"]: o for o in outputs}
    assert len(outputs) == len(questions) == len(by_question)
    product_of = {review_id(r): r["id"] for r in reviews}
    for question in questions:
        output = by_question[question["question_id"]]
        assert (output["product_id"], output["question"]) == (question["product_id"], question["question"])
        assert output["retrieved"], f"nothing retrieved for {question}"
        assert {product_of[rid] for rid in output["retrieved"]} == {question["product_id"]}
        assert output["review_ids"] and set(output["review_ids"]) <= set(output["retrieved"])
        assert output["answer"].count("(" + question["product_id"] + "@") >= 1


def test_the_job_answers_every_question_on_the_mini_cluster(shared_reviews_path: Path, tmp_path: Path) -> None:
    questions = read_questions(SHARED_QUESTIONS)
    reviews = _slice(shared_reviews_path, {q["product_id"] for q in questions})
    index = build_review_index(reviews, tmp_path / "index")
    agent = ProductQAAgent(str(index.directory))

    on_flink = run_on_flink(
        questions, agent, parallelism=2, checkpoint_interval_ms=1_000, journal_path=tmp_path / "journal.db",
        execution_mode="thread", restart_attempts=0,
    )
    _check(questions, on_flink, reviews)
    # Deterministic end to end: the local runner gives the same answers.
    key = lambda o: o["question_id"]  # noqa: E731
    assert sorted(on_flink, key=key) == sorted(run_locally(questions, agent), key=key)
    by_id = {o["question_id"]: o for o in on_flink}
    assert "without my insoles" in by_id["flex-1"]["answer"]
    assert "plantar fasciitis" in by_id["insoles-1"]["answer"].lower()
