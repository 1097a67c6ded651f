"""Public callback ids are safe on a command line."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from flink_agents.cli.main import main
from flink_agents.runtime.features import callbacks
from flink_agents.stores.factory import open_journal_store


def test_a_new_callback_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: Iterator[str] = iter(["-starts-like-an-option", "_fine-id"])
    monkeypatch.setattr(callbacks.secrets, "token_urlsafe", lambda n: next(drawn))
    assert callbacks.new_callback_id() == "_fine-id"
    monkeypatch.undo()
    assert not any(callbacks.new_callback_id().startswith("-") for _ in range(2000))


def test_an_id_starting_with_a_dash_is_taken_after_a_double_dash(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "journal.db"
    store = open_journal_store({"journal.store": "sqlite", "journal.sqlite.path": str(path)})
    store.load_run("job", '"k"', 0)  # creates the file and its tables
    store.close()
    # An id stored before ids avoided the dash: unknown here, but read as an id, not an option.
    assert main(["approvals", "approve", "--journal", str(path), "--", "-abc"]) == 1
    assert "-abc" in capsys.readouterr().err
