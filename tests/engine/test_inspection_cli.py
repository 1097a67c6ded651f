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
