"""Resolve and reject are separate capabilities, held on a real ingress on
127.0.0.1 over the real stores (a SQLite file, a PostgreSQL schema): the
resolve URL cannot reject, the reject URL cannot resolve, a URL without its
token (or with the other route's) is refused and leaves the callback
pending; a callback written by the previous release (no tokens) still
resolves with the URL it was given."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.ingress import CallbackIngress
from flink_agents.stores.callbacks import PENDING, REJECTED, RESOLVED, CallbackRef
from flink_agents.stores.factory import open_journal_store
from tests.support.journal_stores import journal, store  # noqa: F401 (fixtures)

NOW_MS = 1_700_000_000_000
DEADLINE_MS = 4_000_000_000_000
FORBIDDEN = {"error": "this URL does not grant this completion"}


def _post(url: str, body: bytes = b"{}") -> Tuple[int, Dict[str, Any]]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read()
    try:
        return status, json.loads(text)
    except ValueError:  # not one of the ingress's JSON answers (e.g. aiohttp's 404 for no route)
        return status, {"text": text.decode("utf-8", "replace")}




def callback_url(base_url: str, record, state: str) -> str:
    """The URL the runtime hands out for ``record``'s route ``state``."""
    from flink_agents.runtime.features.callbacks import callback_url as runtime_url

    return runtime_url(base_url, record, state)


def _register(store, ordinal: int = 0):
    return store.register(CallbackRef("job", "k", 0, "wait@0", ordinal), f"callback-{ordinal:02d}-" + "x" * 20,
                          "approval", NOW_MS, DEADLINE_MS)


def test_the_resolve_url_cannot_reject_and_the_reject_url_cannot_resolve(store) -> None:
    record = _register(store)
    with CallbackIngress(store, port=0) as ingress:
        resolve_url = callback_url(ingress.base_url, record, RESOLVED)
        reject_url = callback_url(ingress.base_url, record, REJECTED)
        base = f"{ingress.base_url}/callbacks/{record.callback_id}"
        forged = [
            resolve_url.replace("/resolve/", "/reject/"),  # the resolve token on the reject route
            reject_url.replace("/reject/", "/resolve/"),  # the reject token on the resolve route
            f"{base}/resolve", f"{base}/reject",  # the bare id: no longer a capability
            f"{base}/resolve/{'A' * 32}",  # a guessed token
        ]
        for url in forged:
            assert _post(url, b'{"decision": "forged"}') == (403, FORBIDDEN), url
            after = store.get_callback(record.callback_id)
            assert (after.state, after.body, after.late_completions) == (PENDING, None, 0), url

        assert _post(reject_url, b"no") == (202, {"callback_id": record.callback_id, "state": "rejected"})
        # Once finished, a forged URL still learns nothing (403, not the state).
        assert _post(resolve_url.replace("/resolve/", "/reject/")) == (403, FORBIDDEN)
    final = store.get_callback(record.callback_id)
    assert (final.state, final.body, final.late_completions) == (REJECTED, b"no", 0)


def test_each_callback_has_its_own_tokens(store) -> None:
    first, second = _register(store, 0), _register(store, 1)
    tokens = {first.callback_id, first.resolve_token, first.reject_token,
              second.callback_id, second.resolve_token, second.reject_token}
    assert len(tokens) == 6
    with CallbackIngress(store, port=0) as ingress:
        # The first callback's resolve token does not resolve the second.
        other = callback_url(ingress.base_url, second, RESOLVED).replace(second.resolve_token, first.resolve_token)
        assert _post(other)[0] == 403
        assert store.get_callback(second.callback_id).state == PENDING


# -- a callback the previous release wrote -----------------------------------------

# The callbacks table as the previous release created it: no token columns.
_OLD_TABLE = (
    "CREATE TABLE callbacks (callback_id TEXT NOT NULL PRIMARY KEY, journal_id TEXT NOT NULL, key TEXT NOT NULL,"
    " seq BIGINT NOT NULL, step TEXT NOT NULL, ordinal BIGINT NOT NULL, purpose TEXT NOT NULL,"
    " created_ms BIGINT NOT NULL, deadline_ms BIGINT NOT NULL, state TEXT NOT NULL, body {blob},"
    " completed_ms BIGINT, late_completions BIGINT NOT NULL DEFAULT 0,"
    " UNIQUE (journal_id, key, seq, step, ordinal))"
)
_OLD_ROW = (
    "INSERT INTO callbacks (callback_id, journal_id, key, seq, step, ordinal, purpose, created_ms, deadline_ms, state)"
    " VALUES ({p}, 'job', 'k', 0, 'wait@0', {p}, 'approval', 1700000000000, 4000000000000, 'pending')"
)


def _create_schema(journal: Dict[str, str]) -> None:
    """The journal's tables, schema version 1, as this release creates them."""
    store = open_journal_store(journal)
    store.count_entries()
    store.close()


def _write_as_the_previous_release(journal: Dict[str, str], ids: List[str]) -> None:
    """Replace the callbacks table by the previous release's, with pending rows."""
    if journal["journal.store"] == "sqlite":
        import sqlite3

        _create_schema(journal)
        with sqlite3.connect(journal["journal.sqlite.path"]) as connection:
            connection.execute("DROP TABLE callbacks")
            connection.execute(_OLD_TABLE.format(blob="BLOB"))
            for ordinal, callback_id in enumerate(ids):
                connection.execute(_OLD_ROW.format(p="?"), (callback_id, ordinal))
        return
    import psycopg

    _create_schema(journal)
    with psycopg.connect(journal["journal.postgres.dsn"], autocommit=True) as connection:
        connection.execute("DROP TABLE callbacks")
        connection.execute(_OLD_TABLE.format(blob="BYTEA"))
        for ordinal, callback_id in enumerate(ids):
            connection.execute(_OLD_ROW.format(p="%s"), (callback_id, ordinal))


def test_a_pending_callback_of_the_previous_release_still_resolves_after_the_upgrade(journal) -> None:
    resolved_id, rejected_id = "L" * 32, "M" * 32  # the ids were the whole capability then
    _write_as_the_previous_release(journal, [resolved_id, rejected_id])
    store = open_journal_store(journal)  # this release opens it: the token columns are added
    try:
        legacy = store.get_callback(resolved_id)
        assert legacy.state == PENDING and legacy.legacy
        with CallbackIngress(store, port=0) as ingress:
            # The URLs it handed out then, unchanged (a replay makes them again).
            assert callback_url(ingress.base_url, legacy, RESOLVED) == (
                f"{ingress.base_url}/callbacks/{resolved_id}/resolve"
            )
            assert _post(f"{ingress.base_url}/callbacks/{resolved_id}/resolve", b"ok")[0] == 202
            assert _post(f"{ingress.base_url}/callbacks/{rejected_id}/reject", b"no")[0] == 202
            # A token cannot be made up for a row that has none.
            assert _post(f"{ingress.base_url}/callbacks/{resolved_id}/resolve/{'A' * 32}")[0] == 403
            # And new callbacks in the same table get tokens.
            fresh = store.register(CallbackRef("job", "k", 1, "wait@0", 0), "N" * 32, "approval", NOW_MS, DEADLINE_MS)
            assert not fresh.legacy
            assert _post(f"{ingress.base_url}/callbacks/{'N' * 32}/resolve")[0] == 403
        assert (store.get_callback(resolved_id).state, store.get_callback(resolved_id).body) == (RESOLVED, b"ok")
        assert store.get_callback(rejected_id).state == REJECTED
    finally:
        store.close()


# -- the URLs a run hands out, on the local runner ------------------------------------


def try_the_urls(resolve_url: str, reject_url: str) -> List[int]:
    """What an outside system holding both URLs could try: swap their tokens,
    drop them, then resolve properly. Returns the status codes."""
    base, _, _ = resolve_url.partition("/resolve")
    attempts = [resolve_url.replace("/resolve", "/reject"), reject_url.replace("/reject", "/resolve"),
                f"{base}/resolve", resolve_url]
    return [_post(url, b'{"decision": "approved"}')[0] for url in attempts]


async def _wait_for_approval(event: InputEvent, ctx: Any) -> None:
    cb = await ctx.create_callback("approval", 30)
    statuses = await ctx.durable_execute_async(try_the_urls, cb.resolve_url, cb.reject_url)
    ctx.send_event(OutputEvent(output={"statuses": statuses, "body": await cb, "id": cb.callback_id}))


class ApprovalAgent(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.add_action("wait", [InputEvent], _wait_for_approval)


def test_a_runs_urls_each_grant_only_their_route_on_the_local_runner(journal, store) -> None:
    with CallbackIngress(store, port=0) as ingress:
        env = AgentsExecutionEnvironment.get_execution_environment(
            **journal, **{"callbacks.base_url": ingress.base_url, "callbacks.poll_interval_ms": 10}
        )
        collected = env.from_list([{"key": "k", "value": {}}]).apply(ApprovalAgent()).to_list()
        env.execute()
    (output,) = [value for record in collected for value in record.values()]
    assert output["statuses"] == [403, 403, 403, 202]
    assert output["body"] == '{"decision": "approved"}'
    record = store.get_callback(output["id"])
    assert (record.state, record.late_completions) == (RESOLVED, 0)
