"""``flink-agents runs list|show`` and ``callbacks list`` over a real SQLite
journal written by the local path (``tests/support/inspection_journal``),
opened read-only (the file is chmod 0400)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Dict, List

import pytest

from flink_agents.cli.main import main
from tests.support.inspection_journal import build_journal


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    path = tmp_path_factory.mktemp("inspection") / "journal.db"
    info = build_journal(path)
    os.chmod(path, stat.S_IRUSR)  # read-only: the CLI must never need to write
    return {"path": str(path), **info}


def _lines(capsys: pytest.CaptureFixture, *argv: str) -> List[str]:
    assert main(list(argv)) == 0
    return capsys.readouterr().out.splitlines()


def test_runs_list_states_counts_and_tokens(journal, capsys):
    runs = [json.loads(line) for line in _lines(capsys, "runs", "list", "--journal", journal["path"], "--json")]
    by_key = {run["key"]: run for run in runs}
    assert [(r["job"], r["key"], r["state"], r["outcome"]) for r in runs] == [
        ("reviews", "B01", "finished", "ok"), ("claims", "C02", "failed", "skipped"), ("claims", "C01", "parked", None)]
    assert by_key["B01"]["model_calls"] == 2 and by_key["B01"]["tool_calls"] == 1
    assert by_key["B01"]["tokens"] > 0 and by_key["B01"]["duration_ms"] > 0
    only = _lines(capsys, "runs", "list", "--journal", journal["path"], "--json", "--state", "parked")
    assert [json.loads(line)["key"] for line in only] == ["C01"]
    table = _lines(capsys, "runs", "list", "--journal", journal["path"], "--job", "claims", "--key", "C02")
    assert len(table) == 2 and table[1].split()[:5] == ["claims", "C02", "0", "failed", "skipped"]


def test_runs_show_decodes_steps_in_order_and_redacts(journal, capsys):
    out = "\n".join(_lines(capsys, "runs", "show", "--journal", journal["path"], "--key", "B01", "--seq", "0", "--json"))
    assert "secret" not in out and "postgresql://u:***@h/db" in out
    run = json.loads(out)
    assert [s["step"] for s in run["steps"]] == [
        "ask@0", "_chat_model_action@1", "_tool_call_action@2/0", "_tool_call_action@2",
        "_chat_model_action@3", "answer@4", "_run"]
    reply = run["steps"][1]["records"][0]
    assert reply["kind"] == "model_reply" and reply["tool_calls"][0]["name"] == "notify_shipping_manager"
    assert reply["tool_calls"][0]["arguments"]["id"] == "B01"
    tool = run["steps"][2]["records"][0]
    assert tool["kind"] == "tool_result" and tool["result"] == "the shipping manager was notified"
    assert run["tokens"] == sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"]
                                for s in run["steps"] for r in s["records"] if r["kind"] == "model_reply")


def test_callbacks_never_show_their_capability(journal, capsys):
    (callback_id,) = journal["callback_ids"]
    for argv in (["callbacks", "list", "--journal", journal["path"]],
                 ["callbacks", "list", "--journal", journal["path"], "--json", "--state", "pending"],
                 ["runs", "show", "--journal", journal["path"], "--key", "C01", "--seq", "0"]):
        out = "\n".join(_lines(capsys, *argv))
        assert "approve refund" in out and "[callback " in out
        assert callback_id not in out and callback_id[:16] not in out
    assert _lines(capsys, "callbacks", "list", "--journal", journal["path"], "--json", "--state", "resolved") == []


def test_the_journal_is_opened_read_only(journal):
    from flink_agents.inspection import open_reader

    os.chmod(journal["path"], stat.S_IRUSR | stat.S_IWUSR)  # writable file: the connection still refuses
    try:
        with open_reader(journal["path"]) as reader:
            with pytest.raises(Exception, match="readonly|read-only|query_only"):
                reader.rows("DELETE FROM journal")
    finally:
        os.chmod(journal["path"], stat.S_IRUSR)
    with pytest.raises(SystemExit, match="no journal at"):
        main(["runs", "list", "--journal", str(Path(journal["path"]).parent / "missing.db")])


def test_runs_show_summarises_model_requests_and_failed_steps(journal, capsys):
    run = json.loads("\n".join(_lines(capsys, "runs", "show", "--journal", journal["path"], "--key", "B01", "--seq",
                                      "0", "--json")))
    (request,) = [r for s in run["steps"] for r in s["records"] if r["kind"] == "model_request"]
    assert request["model"] == "reviewer" and request["messages"] == 1
    assert "The box was crushed" in request["last_user_message"] and request["tool_calls_asked"] == []
    (asked,) = [r for s in run["steps"] for r in s["records"] if r["kind"] == "tool_request"]
    assert asked["tools"] == ["notify_shipping_manager"]
    assert run["error"] is None

    text = "\n".join(_lines(capsys, "runs", "show", "--journal", journal["path"], "--key", "C02", "--seq", "0"))
    assert text.splitlines()[0].startswith("job=claims key=C02 seq=0 state=failed outcome=skipped "
                                           "error=RuntimeError: refund service refused claim R-2 ")
    failed = json.loads("\n".join(_lines(capsys, "runs", "show", "--journal", journal["path"], "--key", "C02",
                                         "--seq", "0", "--json")))
    attempt = next(r for s in failed["steps"] for r in s["records"] if r["kind"] == "attempt_failed")
    end = next(r for s in failed["steps"] for r in s["records"] if r["kind"] == "run_finished")
    for record in (attempt, end):
        assert (record["error_type"], record["error_message"]) == ("RuntimeError", "refund service refused claim R-2")


def test_runs_list_since_and_prices(journal, capsys, tmp_path):
    def listed(*extra: str) -> List[Dict[str, Any]]:
        return [json.loads(line) for line in _lines(capsys, "runs", "list", "--journal", journal["path"], "--json",
                                                    *extra)]

    every = listed()
    assert [r["key"] for r in listed("--since", "1h")] == ["B01", "C02", "C01"]
    assert listed("--since", "2999-01-01T00:00:00Z") == []
    c02_start = next(r["start"] for r in every if r["key"] == "C02")
    assert [r["key"] for r in listed("--since", c02_start)] == ["C02", "C01"]  # B01 committed before C02 started

    assert all(r["cost_usd"] is None for r in every)
    prices = tmp_path / "prices.yaml"
    prices.write_text("gpt-test: {input: 2.0, output: 10.0}\n")
    by_key = {r["key"]: r for r in listed("--prices", str(prices))}
    usage = by_key["B01"]["usage"]
    assert by_key["B01"]["cost_usd"] == pytest.approx((usage["input_tokens"] * 2.0 + usage["output_tokens"] * 10.0) / 1e6)
    assert by_key["C02"]["cost_usd"] is None  # no model call
    table = _lines(capsys, "runs", "list", "--journal", journal["path"], "--prices", str(prices), "--key", "B01")
    assert table[0].split()[-1] == "COST_USD" and float(table[1].split()[-1]) == pytest.approx(by_key["B01"]["cost_usd"])


def test_the_read_path_against_postgresql(journal, capsys):
    from flink_agents.inspection import open_reader
    from flink_agents.stores import PostgresJournalStore
    from tests.support.journal_stores import postgres_schema

    with postgres_schema() as dsn:
        info = build_journal(Path("unused"), PostgresJournalStore(dsn))
        runs = [json.loads(line) for line in _lines(capsys, "runs", "list", "--journal", dsn, "--json")]
        on_sqlite = [json.loads(line) for line in _lines(capsys, "runs", "list", "--journal", journal["path"], "--json")]
        same = ("job", "key", "seq", "state", "outcome", "model_calls", "tool_calls", "tokens")
        assert [{k: r[k] for k in same} for r in runs] == [{k: r[k] for k in same} for r in on_sqlite]
        run = json.loads("\n".join(_lines(capsys, "runs", "show", "--journal", dsn, "--key", "C02", "--seq", "0",
                                          "--json")))
        assert run["state"] == "failed" and run["error"] == "RuntimeError: refund service refused claim R-2"
        (callback_id,) = info["callback_ids"]
        out = "\n".join(_lines(capsys, "callbacks", "list", "--journal", dsn, "--state", "pending"))
        assert "approve refund" in out and callback_id not in out
        with open_reader(dsn) as reader:
            assert reader.kind == "postgres"
            with pytest.raises(Exception, match="read-only"):
                reader.rows("DELETE FROM journal")
