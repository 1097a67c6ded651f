"""A callback's capability (its URLs, its id, its tokens) never reaches the
event log (files or logger, at every level) or a follower's progress
records; a short fingerprint stands in for it. Driven on the local runner
with a SQLite journal, the callback completed over a real ingress on
127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import logging
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.ingress import CallbackIngress
from flink_agents.stores.factory import open_journal_store


def hand_out(resolve_url: str, reject_url: str, callback_id: str) -> Dict[str, Any]:
    """An outside system takes the URLs and answers at once; the journaled
    result echoes what it was given (so the progress stream carries it)."""
    request = urllib.request.Request(resolve_url, data=b'{"decision": "approved"}', method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        status = response.status
    return {"status": status, "resolve_url": resolve_url, "reject_url": reject_url, "callback_id": callback_id,
            "message": f"handed out callback {callback_id}"}


async def _hand_out_and_wait(event: InputEvent, ctx: Any) -> None:
    cb = await ctx.create_callback("manager approval", 30)
    echoed = await ctx.durable_execute_async(hand_out, cb.resolve_url, cb.reject_url, cb.callback_id)
    body = await cb
    ctx.send_event(OutputEvent(output={
        "id": cb.callback_id, "urls": [cb.resolve_url, cb.reject_url], "echoed": echoed, "body": body,
        "note": f"Operation {cb.callback_id} ('manager approval') completed",
    }))


class HandOutAgent(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.add_action("hand_out", [InputEvent], _hand_out_and_wait)


@pytest.mark.parametrize("level", ["STANDARD", "VERBOSE"])
def test_callback_urls_and_ids_never_reach_the_event_log_or_the_progress_records(
    tmp_path: Path, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    journal = {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
    store = open_journal_store(journal)
    log_dir = tmp_path / "event-log"
    try:
        with CallbackIngress(store, port=0) as ingress:
            env = AgentsExecutionEnvironment.get_execution_environment(**journal, **{
                "callbacks.base_url": ingress.base_url, "callbacks.poll_interval_ms": 10,
                "baseLogDir": str(log_dir), "event-log.level": level,
            })
            builder = env.from_list([{"key": "k", "value": {}}]).apply(HandOutAgent())
            outputs, progress = builder.to_list(), builder.to_progress_list()
            env.execute()
        (output,) = [value for record in outputs for value in record.values()]
        callback_id = output["id"]
        record = store.get_callback(callback_id)
    finally:
        store.close()
    tokens = [getattr(record, name, None) for name in ("resolve_token", "reject_token")]
    secrets = [callback_id] + [token for token in tokens if token]
    assert all(secret in output["urls"][0] + output["urls"][1] for secret in secrets)  # the output keeps them
    assert output["body"] == '{"decision": "approved"}'

    logged = "".join(path.read_text() for path in sorted(log_dir.iterdir()))
    followed = json.dumps(progress)
    assert '"_input_event"' in logged and "manager approval" in logged
    assert {r["kind"] for r in progress} >= {"call_result", "output", "run_finished"}
    for what, text in (("event log", logged), ("progress", followed)):
        for secret in secrets:
            assert secret not in text, f"{what} holds a capability"
        # Enough stays to correlate: the route, and the id's fingerprint.
        mark = f"[callback {hashlib.sha256(callback_id.encode()).hexdigest()[:12]}]"
        assert f"/callbacks/{mark}/resolve" in text and f"/callbacks/{mark}/reject" in text, what
        assert f"handed out callback {mark}" in text and f"Operation {mark}" in text, what


def test_the_logging_event_logger_redacts_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
    store = open_journal_store(journal)
    try:
        with CallbackIngress(store, port=0) as ingress, caplog.at_level(logging.INFO, "flink_agents.event_log"):
            env = AgentsExecutionEnvironment.get_execution_environment(**journal, **{
                "callbacks.base_url": ingress.base_url, "callbacks.poll_interval_ms": 10,
                "eventLoggerType": "slf4j", "event-log.level": "VERBOSE",
            })
            outputs = env.from_list([{"key": "k", "value": {}}]).apply(HandOutAgent()).to_list()
            env.execute()
        (output,) = [value for record in outputs for value in record.values()]
        record = store.get_callback(output["id"])
    finally:
        store.close()
    assert "manager approval" in caplog.text
    for secret in (record.callback_id, getattr(record, "resolve_token", None), getattr(record, "reject_token", None)):
        assert secret is None or secret not in caplog.text
