"""A real SQLite journal for the inspection CLI's tests: runs of two jobs on
the production local path (``KeyedHost`` over ``LocalDriver``), written by
the SQLite store.

- job ``reviews``: ``B01``, the review agent over the scripted OpenAI
  server: a tool round, then an answer holding a DSN with a password;
  finished.
- job ``claims``: ``C01`` journals a durable call, then waits on a
  callback and is cut off (as at a failover): parked; ``C02`` journals a
  durable call, fails twice (``skip`` after two attempts): its run ends
  skipped (failed, on the error stream).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.stores.callbacks import PENDING
from flink_agents.stores.journal import JournalStore
from flink_agents.stores.sqlite_store import SQLiteJournalStore
from tests.support import host_runs
from tests.support.scripted_openai_server import ScriptedChatServer
from tests.unit.test_openai_chat_model import REVIEW, TOOL_CALL_REPLY, openai_review_agent

SECRET_ANSWER = '{"score": 1, "reasons": ["stored at postgresql://u:secret@h/db"]}'
CALLBACKS = {"callbacks.poll_interval_ms": 10, "callbacks.base_url": "http://claims.test:9/"}
CREATED: List[Any] = []  # callbacks as the claims action saw them


def look_up_policy(claim: str) -> Dict[str, Any]:
    return {"claim": claim, "covered": True}


class ClaimsAgent(Agent):
    """``claim``: a durable call, then ``fail`` (raises) or a callback awaited."""

    def __init__(self) -> None:
        super().__init__()
        self.add_action("claim", [InputEvent], ClaimsAgent.claim)

    @staticmethod
    async def claim(event: InputEvent, ctx: Any) -> None:
        policy = ctx.durable_execute(look_up_policy, event.input["claim"])
        if event.input.get("fail"):
            raise RuntimeError(f"refund service refused claim {policy['claim']}")
        cb = await ctx.create_callback("approve refund", 600)
        CREATED.append(cb)
        ctx.send_event(OutputEvent(output={"approved": await cb}))


def _engine(agent: Agent, job_id: str, store: JournalStore, **config: Any) -> AgentEngine:
    return AgentEngine(AgentPlan.from_agent(agent), dict(config), job_id=job_id, store=store)


def _park(engine: AgentEngine, driver: LocalDriver, store: JournalStore, key: str, value: Any) -> None:
    """Run ``key``'s record until its callback is pending, then cut it off."""

    async def go() -> None:
        task = asyncio.ensure_future(host_runs.process_async(engine, driver, key, value))
        deadline = time.monotonic() + 10
        while not CREATED and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())


def build_journal(path: Path, store: Optional[JournalStore] = None) -> Dict[str, Any]:
    """Write the runs above into a SQLite journal at ``path`` (or into
    ``store``, which is closed after); what the tests need to know of them
    (the callback's id, to check it never shows)."""
    CREATED.clear()
    with ScriptedChatServer() as server:
        server.replies.extend([TOOL_CALL_REPLY, {"role": "assistant", "content": SECRET_ANSWER}])
        store = SQLiteJournalStore(path) if store is None else store
        try:
            reviews = _engine(openai_review_agent(server.base_url), "reviews", store)
            try:
                host_runs.process(reviews, LocalDriver(), "B01", REVIEW)
            finally:
                reviews.close()
            claims = _engine(ClaimsAgent(), "claims", store, error_strategy="skip",
                             **{"error_retry.max_attempts": 2, "error_retry.initial_backoff_s": 0.01}, **CALLBACKS)
            driver = LocalDriver()
            try:
                host_runs.process(claims, driver, "C02", {"claim": "R-2", "fail": True})
                _park(claims, driver, store, "C01", {"claim": "R-1"})
            finally:
                claims.close()
            pending = [row for row in store._callback_rows().values() if row.state == PENDING] \
                if hasattr(store, "_callback_rows") else None
        finally:
            store.close()
    return {"callback_ids": [cb.callback_id for cb in CREATED], "pending": pending, "server_requests": server.requests}
