"""The shipping-claims job's parts, fast and in-process: the carrier's rule,
its inbox handling (malformed lines, duplicates, partial lines) and HTTP
client against a real ingress, and the agent's action on the engine
(carrier bodies kept, no second filing after a failover mid-wait). The whole
flow on Flink is in test_shipping_claims_e2e.py."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.ingress import CallbackIngress
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.callbacks import PENDING, REJECTED, RESOLVED, CallbackRef
from flink_agents.stores.memory_store import InMemoryJournalStore
from flink_agents.jobs.carrier_claims import Claim, Desk, InboxTail, decide, parse_claim, post_json, run
from flink_agents.jobs.review_records import read_reviews
from flink_agents.jobs.shipping_claims import INBOX_OPTION, ShippingClaimsAgent, carrier_answer
from tests.support import host_runs

SAMPLE = Path(__file__).resolve().parents[2] / "jobs" / "data" / "sample_reviews.jsonl"


def _claim(text: str, claim_id: str = "0123456789abcdef", product_id: str = "P1") -> Dict[str, Any]:
    return {"claim_id": claim_id, "review_id": f"{product_id}-1", "product_id": product_id, "text": text,
            "resolve_url": "http://carrier.test/r", "reject_url": "http://carrier.test/j", "deadline_ms": 1}


def test_rule_approves_damaged_packaging_or_transit_and_rejects_the_rest() -> None:
    from flink_agents.integrations.chat_models.local.lexicon import has_shipping_damage

    damaged = [r for r in read_reviews(SAMPLE).reviews if has_shipping_damage(r["review"])]
    approved = {r["review"][:30] for r in damaged if decide(parse_claim(json.dumps(_claim(r["review"])))).approved}
    assert approved == {
        "The box was crushed and the gl", "Damaged in transit: the lid hi", "The package showed up soaked a",
        "The box was torn open on arriv", "Box was crushed and the alumin", "Delivered fast and the lamp wa",
    }
    assert len(damaged) - len(approved) == 3  # "arrived broken", in an intact or thin package
    body = decide(Claim(**_claim("The parcel came soaked and torn; the mug was smashed."))).body
    assert body == {"claim_id": "0123456789abcdef", "claim_number": "CLM-01234567", "decision": "approved",
                    "refund_usd": 50.0, "evidence": "damaged packaging"}
    assert not decide(Claim(**_claim("The toe box was crushed flat after a week."))).approved


def test_malformed_and_duplicate_lines_are_logged_by_line_and_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = tmp_path / "inbox.jsonl"
    good = json.dumps(_claim("Box was crushed."))
    inbox.write_text("\n".join([
        good, "not json at all", json.dumps({"claim_id": "x"}), "", good,
        json.dumps({**_claim("y"), "resolve_url": "file:///etc/passwd"}), "[1, 2]",
    ]) + "\n" + json.dumps(_claim("Box was torn.", claim_id="fedcba9876543210")))  # no newline yet
    posted: List[str] = []
    desk = Desk(0.0, frozenset(), post=lambda url, body: (posted.append(url), (202, "{}"))[1])
    tail = InboxTail(inbox)
    with caplog.at_level(logging.INFO, logger="flink_agents.jobs.carrier_claims"):
        for line_no, line in tail.read():
            desk.take(line_no, line)
        desk.answer_due()
        assert posted == ["http://carrier.test/r"]  # the partial last line waits
        stop = tmp_path / "stop"
        stop.touch()
        tally = run(inbox, desk, stop)  # a fresh tail re-reads: all duplicates now
    assert posted == ["http://carrier.test/r"] * 2
    assert (tally["claims"], tally["malformed"], tally["duplicates"]) == (2, 4 * 2, 1 + 2)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("inbox line 2: malformed claim, skipped: not valid JSON") for m in messages)
    assert any(m.startswith("inbox line 3: malformed claim, skipped: field 'review_id' is missing") for m in messages)
    assert any("inbox line 5: duplicate of claim CLM-01234567 (line 1)" in m for m in messages)
    assert any("inbox line 6: malformed claim, skipped: field 'resolve_url' is not an http(s) URL" in m
               for m in messages)
    assert any(m.startswith("inbox line 7: malformed claim, skipped: not a JSON object") for m in messages)


def test_post_json_against_the_ingress_202_then_late_404_and_retries_when_down() -> None:
    store = InMemoryJournalStore()
    now_ms = int(time.time() * 1000)
    record = store.register(CallbackRef("j", "k", 0, "a@0", 0), "C" * 32, "claim", now_ms, now_ms + 60_000)
    with CallbackIngress(store, port=0) as ingress:
        url = f"{ingress.base_url}/callbacks/{'C' * 32}/reject/{record.reject_token}"
        assert post_json(url, {"decision": "rejected"})[0] == 202
        status, text = post_json(url, {"decision": "rejected"})
        assert (status, json.loads(text)["state"]) == (404, REJECTED)
        assert post_json(f"{ingress.base_url}/callbacks/{'D' * 32}/resolve", {})[0] == 404
        port = ingress.port
    assert json.loads(store.get_callback("C" * 32).body) == {"decision": "rejected"}
    delays: List[float] = []
    status, error = post_json(f"http://127.0.0.1:{port}/callbacks/x/resolve", {}, attempts=3, sleep=delays.append)
    assert status is None and error and delays == [0.2, 0.4]


@pytest.mark.parametrize("body, kept", [
    ('{"claim_number": "CLM-1"}', {"claim_number": "CLM-1"}),
    ("approved, cheque in the post", "approved, cheque in the post"),
    (b"\xffrefund", "\\xffrefund"),
    ("NaN", "NaN"),
])
def test_carrier_bodies_are_parsed_or_kept_as_text(body: Any, kept: Any) -> None:
    assert carrier_answer(body) == kept


def _engine(store: InMemoryJournalStore, inbox: Path) -> AgentEngine:
    config = {"callbacks.poll_interval_ms": 10, "callbacks.base_url": "http://ingress.test:9", INBOX_OPTION: str(inbox)}
    return AgentEngine(AgentPlan.from_agent(ShippingClaimsAgent()), config, job_id="job", store=store)


def _filed(inbox: Path) -> List[Claim]:
    return [parse_claim(line) for line in inbox.read_text().splitlines()] if inbox.exists() else []


def test_action_outputs_and_keeps_a_body_that_is_not_json(tmp_path: Path) -> None:
    store, inbox = InMemoryJournalStore(), tmp_path / "inbox.jsonl"
    reviews = [("A", {"id": "A", "review": "The box was crushed and the vase broken.", "ts": 1}),
               ("B", {"id": "B", "review": "Arrived broken, glass in pieces all over the box.", "ts": 2}),
               ("C", {"id": "C", "review": "Lovely, fits well.", "ts": 3})]

    async def carrier() -> None:
        deadline = time.monotonic() + 10
        while len(_filed(inbox)) < 2:
            assert time.monotonic() < deadline, f"claims filed: {_filed(inbox)}"
            await asyncio.sleep(0.01)
        for claim in _filed(inbox):
            callback_id = claim.resolve_url.split("/callbacks/")[1].split("/")[0]
            state, body = (RESOLVED, b"approved (no JSON here)") if claim.product_id == "A" else (REJECTED, b'{"n": 1}')
            store.complete(callback_id, state, body, int(time.time() * 1000))

    async def go() -> LocalDriver:
        driver, engine = LocalDriver(), _engine(store, inbox)
        await asyncio.gather(carrier(), *(host_runs.process_async(engine, driver, key, value) for key, value in reviews))
        return driver

    outputs = {key: value for output in asyncio.run(go()).outputs for key, value in output.items()}
    claim_ids = {claim.product_id: claim.claim_id for claim in _filed(inbox)}
    assert outputs == {
        "A": {"id": "A-1", "product_id": "A", "shipping_damage": True, "claim_id": claim_ids["A"],
              "claim": "approved", "carrier": "approved (no JSON here)"},
        "B": {"id": "B-2", "product_id": "B", "shipping_damage": True, "claim_id": claim_ids["B"],
              "claim": "rejected", "carrier": {"n": 1}},
        "C": {"id": "C-3", "product_id": "C", "shipping_damage": False, "claim": None},
    }


def test_failover_while_waiting_does_not_file_the_claim_again(tmp_path: Path) -> None:
    store, inbox, driver = InMemoryJournalStore(), tmp_path / "inbox.jsonl", LocalDriver()
    review = {"id": "A", "review": "The box was crushed and the vase broken.", "ts": 1}

    async def crash_while_waiting() -> None:
        task = asyncio.ensure_future(host_runs.process_async(_engine(store, inbox), driver, "A", review))
        # Parked on the callback: the filing's result is journaled (the run
        # commits before it waits), not merely written to the inbox.
        deadline = time.monotonic() + 30
        while not any(e.function_id.endswith(":file_claim") for e in store.load_run("job", '"A"', 0).values()):
            assert time.monotonic() < deadline, "the filing was never journaled"
            await asyncio.sleep(0.005)
        assert len(_filed(inbox)) == 1
        task.cancel()  # the worker dies; the record stays pending in state
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(crash_while_waiting())
    (row,) = [r for r in store._callback_rows().values() if r.state == PENDING]
    store.complete(row.callback_id, RESOLVED, b'{"ok": true}', int(time.time() * 1000))
    host_runs.resume(_engine(store, inbox), driver, "A")
    (claim,) = _filed(inbox)  # filed once: the replay found the filing in the journal
    assert driver.outputs == [{"A": {"id": "A-1", "product_id": "A", "shipping_damage": True,
                                     "claim_id": claim.claim_id, "claim": "approved", "carrier": {"ok": True}}}]
