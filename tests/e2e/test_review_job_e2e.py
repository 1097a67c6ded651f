"""The review-analysis job end to end: real PyFlink jobs on the local
mini-cluster, the local runner, and the job's command line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, run_locally, run_on_flink
from flink_agents.jobs.review_records import read_reviews
from tests.support.flink_jobs import child_environment

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "flink_agents" / "jobs" / "data" / "sample_reviews.jsonl"


def _check_outputs(reviews: list[dict], outputs: list[dict]) -> None:
    """Every review has exactly one valid output, and each product's
    reviews_seen counts 1..n in input order."""
    assert len(outputs) == len(reviews)
    by_review = {(o["id"], o["ts"]): o for o in outputs}
    assert len(by_review) == len(reviews), "an output is duplicated or missing"
    seen_per_product: dict[str, int] = defaultdict(int)
    score_sum: dict[str, int] = defaultdict(int)
    for review in reviews:
        output = by_review[(review["id"], review["ts"])]
        assert isinstance(output["score"], int) and 1 <= output["score"] <= 5
        assert output["reasons"] and all(isinstance(r, str) and r for r in output["reasons"])
        seen_per_product[review["id"]] += 1
        score_sum[review["id"]] += output["score"]
        assert output["reviews_seen"] == seen_per_product[review["id"]]
        expected_mean = round(score_sum[review["id"]] / seen_per_product[review["id"]], 3)
        assert output["mean_score"] == pytest.approx(expected_mean)


def test_job_on_the_shared_reviews_matches_the_local_runner(shared_reviews_path: Path, tmp_path: Path) -> None:
    reviews = read_reviews(shared_reviews_path).reviews
    assert len(reviews) == 2700

    on_flink = run_on_flink(
        reviews, ReviewAnalysisAgent(), parallelism=2, checkpoint_interval_ms=2_000,
        journal_path=tmp_path / "journal.db",
    )
    _check_outputs(reviews, on_flink)
    assert len({r["id"] for r in reviews}) == 31

    local = run_locally(reviews, ReviewAnalysisAgent())
    _check_outputs(reviews, local)
    key = lambda o: (o["id"], o["ts"])  # noqa: E731
    assert sorted(on_flink, key=key) == sorted(local, key=key)


def _run_job(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flink_agents.jobs.review_analysis", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_environment(),
    )


def test_job_command_on_the_bundled_sample(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    done = _run_job("--output", str(output))
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [json.loads(line) for line in output.read_text().splitlines()]
    reviews = read_reviews(SAMPLE).reviews
    _check_outputs(reviews, outputs)
    # The bundled sample reports shipping damage; the local model says so.
    assert any("reports shipping damage" in o["reasons"] for o in outputs)


def _broken_file(tmp_path: Path) -> Path:
    lines = SAMPLE.read_text().splitlines()[:5]
    lines.insert(2, '{"id": "B0BROKEN01", "review": "cut off here')  # line 3: bad JSON
    lines.insert(4, '{"id": "B0BROKEN02", "ts": 5}')  # line 5: no review
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_line_fails_the_job_naming_the_line(tmp_path: Path) -> None:
    done = _run_job("--input", str(_broken_file(tmp_path)), "--output", str(tmp_path / "o.jsonl"))
    assert done.returncode == 2
    assert "broken.jsonl:3: bad review record: not valid JSON" in done.stderr


def test_malformed_lines_are_skipped_and_counted_on_request(tmp_path: Path) -> None:
    output = tmp_path / "o.jsonl"
    done = _run_job(
        "--input", str(_broken_file(tmp_path)), "--output", str(output), "--skip-bad-records", "--runner", "local"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipped 2 bad record(s)" in done.stderr
    assert "broken.jsonl:5: bad review record: field 'review': Field required" in done.stderr
    assert len(output.read_text().splitlines()) == 5


@pytest.mark.parametrize("runner", ["local", "flink"])
@pytest.mark.parametrize("case", ["invalid_utf8", "nested_200000_deep", "lone_surrogate"])
def test_undecodable_lines_are_skipped_naming_the_line_on_both_runners(
    tmp_path: Path, case: str, runner: str
) -> None:
    """A line that is not UTF-8, is nested 200,000 deep, or holds a lone
    surrogate is one bad record under --skip-bad-records: the job runs the
    other reviews to the end (on Flink: with no restart and no opaque Java
    failure) and names the skipped line."""
    from tests.unit.test_input_reader import BAD_LINES

    bad_line, reason = BAD_LINES[case]
    good = SAMPLE.read_bytes().splitlines()[:4]
    path = tmp_path / "reviews.jsonl"
    path.write_bytes(b"\n".join([*good[:2], bad_line, *good[2:]]) + b"\n")
    output = tmp_path / "o.jsonl"
    done = _run_job(
        "--input", str(path), "--output", str(output), "--skip-bad-records", "--runner", runner,
        "--parallelism", "1",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{path}:3: bad review record: {reason}" in done.stderr
    assert "skipped 1 bad record(s)" in done.stderr
    outputs = [json.loads(line) for line in output.read_text().splitlines()]
    _check_outputs([json.loads(line) for line in good], outputs)
