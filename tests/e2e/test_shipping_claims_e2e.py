"""The shipping-claims job end to end: the job's command on a Flink
mini-cluster with the callback ingress and the carrier subprocess, and the
same flow on the local runner (also with claims the carrier holds past their
deadline)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from flink_agents.integrations.chat_models.local.lexicon import has_shipping_damage
from flink_agents.jobs.carrier_claims import decide, parse_claim
from flink_agents.jobs.review_records import read_reviews
from flink_agents.jobs.shipping_claims import ClaimsSetup, run_job
from tests.support.flink_jobs import child_environment

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "jobs" / "data" / "sample_reviews.jsonl"
HELD_PRODUCT = "B0FF3Q1Y9D"  # three damage reviews in the sample


def _check(outputs: List[Dict[str, Any]], inbox: Path, held: frozenset = frozenset()) -> None:
    """One output per review; each damage review filed exactly once and
    decided by the carrier's rule (held products: timed out)."""
    reviews = read_reviews(SAMPLE).reviews
    by_id = {o["id"]: o for o in outputs}
    assert len(outputs) == len(reviews) == len(by_id), "an output is duplicated or missing"
    claims = [parse_claim(line) for line in inbox.read_text().splitlines()]
    filed = {claim.review_id: claim for claim in claims}
    assert len(filed) == len(claims), "a claim was filed twice"
    damaged = 0
    for review in reviews:
        output = by_id[f"{review['id']}-{review['ts']}"]
        assert output["product_id"] == review["id"]
        if not has_shipping_damage(review["review"]):
            assert output == {"id": output["id"], "product_id": review["id"], "shipping_damage": False, "claim": None}
            assert output["id"] not in filed
            continue
        damaged += 1
        claim = filed[output["id"]]
        assert claim.text == review["review"] and claim.claim_id == output["claim_id"]
        assert output["shipping_damage"] is True
        if review["id"] in held:
            assert output["claim"] == "timed_out"
            assert output["carrier"].startswith("no decision within")
            continue
        decision = decide(claim)
        assert output["claim"] == ("approved" if decision.approved else "rejected")
        assert output["carrier"] == decision.body  # the carrier's JSON, parsed
    assert damaged == len(claims) == 9




def test_job_command_on_the_mini_cluster(tmp_path: Path) -> None:
    output = tmp_path / "claims.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "flink_agents.jobs.shipping_claims", "--output", str(output)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=child_environment(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [json.loads(line) for line in output.read_text().splitlines()]
    _check(outputs, tmp_path / "claims.jsonl.carrier-inbox.jsonl")
    assert "60 reviews, 9 shipping-damage claims: 6 approved, 3 rejected, 0 timed out; 0 late POST(s)" in done.stderr
    log = (tmp_path / "claims.jsonl.carrier.log").read_text()
    assert log.count("-> 202 accepted") == 9, log
    assert "/callbacks/" not in log  # the URLs are capabilities: never logged
    assert not (tmp_path / "claims.jsonl.partial").exists()


def test_local_runner_and_claims_held_past_their_deadline(tmp_path: Path) -> None:
    reviews = read_reviews(SAMPLE).reviews
    outputs, run = run_job(reviews, ClaimsSetup.beside(tmp_path / "local.jsonl"), runner="local")
    _check(outputs, tmp_path / "local.jsonl.carrier-inbox.jsonl")
    assert run.posts["accepted"] == 9 and run.posts["late"] == 0 and run.carrier_exit_code == 0

    setup = ClaimsSetup.beside(tmp_path / "held.jsonl", claim_timeout_s=1.0,
                               carrier_args=["--hold-product", HELD_PRODUCT])
    outputs, run = run_job(reviews, setup, runner="local")
    _check(outputs, setup.inbox_path, held=frozenset({HELD_PRODUCT}))
    # The held claims were answered when the carrier stopped: late, 404, counted.
    # None refused: the carrier sent the run's bearer token and each claim's own URLs.
    assert run.posts == {"accepted": 6, "unknown": 0, "late": 3, "too_large": 0, "store_errors": 0, "body_timeout": 0,
                         "forbidden": 0, "unauthorized": 0}
    assert setup.carrier_log_path.read_text().count("-> 404 late: the callback is already timed_out") == 3
