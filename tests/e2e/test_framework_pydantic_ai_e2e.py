"""A Pydantic AI agent run durably inside a real PyFlink job on the local
mini-cluster (``integrations.frameworks.pydantic_ai``), and the job
``flink_agents.jobs.review_analysis_pydantic_ai`` over the bundled sample,
both against the strict scripted OpenAI server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("pyflink")

from flink_agents.jobs.review_analysis import run_on_flink  # noqa: E402
from flink_agents.jobs.review_analysis_pydantic_ai import ReviewAnalysisPydanticAIAgent  # noqa: E402
from flink_agents.jobs.review_records import read_reviews  # noqa: E402
from tests.support.flink_jobs import child_environment  # noqa: E402
from tests.support.scripted_openai_server import OpenAIScriptedServer  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "jobs" / "data" / "sample_reviews.jsonl"
DAMAGE = re.compile(r"\b(broken|crushed|dented|damaged|cracked|smashed|soaked)\b", re.IGNORECASE)


def _score(review: str) -> int:
    return 1 + len(review) % 5


def _reply(request: Dict[str, Any], index: int) -> Dict[str, Any]:
    """The model: ``notify_shipping_manager`` first for a damaged product,
    then the typed answer through Pydantic AI's ``final_result`` output tool
    (the provider's id ``call_0`` every time)."""
    messages = request["messages"]
    asked = json.loads(next(m["content"] for m in messages if m["role"] == "user"))
    notified = any(m["role"] == "tool" for m in messages)
    if DAMAGE.search(asked["review"]) and not notified:
        name, arguments = "notify_shipping_manager", asked
    else:
        reasons = ["arrived damaged"] if notified else [f"{len(asked['review'])} characters"]
        name, arguments = "final_result", {"score": _score(asked["review"]), "reasons": reasons}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _check(reviews: List[Dict[str, Any]], outputs: List[Dict[str, Any]]) -> None:
    """One typed output per review, the per-product summary counting 1..n."""
    assert len(outputs) == len(reviews)
    by_review = {(o["id"], o["ts"]): o for o in outputs}
    seen: Dict[str, int] = defaultdict(int)
    for review in reviews:
        output = by_review[(review["id"], review["ts"])]
        seen[review["id"]] += 1
        assert output["score"] == _score(review["review"])
        damaged = bool(DAMAGE.search(review["review"]))
        assert output["reasons"] == (["arrived damaged"] if damaged else [f"{len(review['review'])} characters"])
        assert output["reviews_seen"] == seen[review["id"]]


def test_the_job_scores_every_sample_review_on_the_mini_cluster(tmp_path: Path) -> None:
    """The job's agent on Flink (two subtasks, thread mode) over the bundled
    sample: 60 reviews of 6 products, 8 of them damaged (each asks twice: the
    notification, then the answer)."""
    reviews = read_reviews(SAMPLE).reviews
    damaged = sum(1 for r in reviews if DAMAGE.search(r["review"]))
    assert (len(reviews), len({r["id"] for r in reviews}), damaged) == (60, 6, 8)
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(_reply)
        outputs = run_on_flink(
            reviews, ReviewAnalysisPydanticAIAgent("openai:gpt-4o-mini", server.base_url), parallelism=2,
            checkpoint_interval_ms=1_000, journal_path=tmp_path / "journal.db", restart_attempts=0,
            execution_mode="thread", job_name="review-analysis-pydantic-ai",
        )
    _check(reviews, outputs)
    assert len(server.requests) == len(reviews) + damaged


def test_the_job_command_runs_the_sample(tmp_path: Path) -> None:
    """``python -m flink_agents.jobs.review_analysis_pydantic_ai`` against an
    OpenAI-compatible server at --base-url (the local runner: the Flink run
    is the test above)."""
    reviews = read_reviews(SAMPLE).reviews
    output = tmp_path / "out.jsonl"
    with OpenAIScriptedServer() as server:
        server.set_reply_fn(_reply)
        done = subprocess.run(
            [sys.executable, "-m", "flink_agents.jobs.review_analysis_pydantic_ai", "--base-url", server.base_url,
             "--output", str(output), "--runner", "local"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=child_environment(),
        )
        assert done.returncode == 0, done.stderr[-3000:]
    _check(reviews, [json.loads(line) for line in output.read_text().splitlines()])
    assert len(server.requests) == len(reviews) + 8
    assert f"{len(reviews)} reviews -> {output}" in done.stderr


def test_the_job_command_refuses_a_model_it_cannot_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "flink_agents.jobs.review_analysis_pydantic_ai", "--model", "anthropic:claude",
         "--output", str(tmp_path / "o.jsonl")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, env=child_environment(),
    )
    assert done.returncode == 2 and "--model must be 'openai:NAME'" in done.stderr
