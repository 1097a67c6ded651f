"""A journal that fits a cluster (issue 18): a cluster submission refuses an
SQLite journal with a relative or undeclared path, naming PostgreSQL and the
options to set; the mini-cluster accepts everything. Engine level: the
execution target is given as Flink's ``execution.target`` would be, and one
test reads it from a local PyFlink environment (no cluster)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flink_agents.runtime.flink.journal_placement import (
    JournalPlacementError,
    check_journal_placement,
    execution_target,
    is_cluster,
)

CLUSTER_TARGETS = ["remote", "embedded", "yarn-per-job", "yarn-application", "kubernetes-application"]


@pytest.mark.parametrize("target", ["local", "", None, "LOCAL"])
def test_the_mini_cluster_accepts_every_journal(target: str, tmp_path: Path) -> None:
    assert not is_cluster(target)
    for config in ({}, {"journal.sqlite.path": "rel.db"}, {"journal.store": "memory"},
                   {"journal.store": "postgres"}, {"journal.sqlite.path": str(tmp_path / "j.db")}):
        check_journal_placement(config, target)


@pytest.mark.parametrize("target", CLUSTER_TARGETS)
def test_a_cluster_refuses_the_default_relative_sqlite_journal(target: str) -> None:
    assert is_cluster(target)
    with pytest.raises(JournalPlacementError) as raised:
        check_journal_placement({}, target)  # journal.store defaults to sqlite, the path to a relative file
    message = str(raised.value)
    assert f"execution.target: {target}" in message
    assert "relative path 'flink_agents_journal.db'" in message
    assert "journal.store: postgres" in message and "journal.postgres.dsn" in message
    assert "FLINK_AGENTS_POSTGRES_DSN" in message
    assert isinstance(raised.value, ValueError)


def test_a_relative_path_is_refused_even_when_declared_shared() -> None:
    with pytest.raises(JournalPlacementError, match="relative path 'journals/j.db'"):
        check_journal_placement({"journal.sqlite.path": "journals/j.db", "journal.sqlite.shared": True}, "remote")


def test_an_absolute_path_needs_the_shared_declaration(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    with pytest.raises(JournalPlacementError) as raised:
        check_journal_placement({"journal.store": "sqlite", "journal.sqlite.path": path}, "remote")
    assert f"{path!r} is not declared shared" in str(raised.value)
    assert "journal.sqlite.shared: true" in str(raised.value) and "journal.store: postgres" in str(raised.value)
    check_journal_placement({"journal.sqlite.path": path, "journal.sqlite.shared": "true"}, "remote")


def test_postgres_fits_a_cluster_and_a_missing_dsn_is_only_warned(caplog: pytest.LogCaptureFixture) -> None:
    dsn = "postgresql://u@db.example/journal"
    with caplog.at_level(logging.WARNING):
        check_journal_placement({"journal.store": "postgres", "journal.postgres.dsn": dsn}, "remote")
        assert caplog.records == []
        check_journal_placement({"journal.store": "Postgres"}, "kubernetes-application")
    assert "each TaskManager reads FLINK_AGENTS_POSTGRES_DSN from its own environment" in caplog.text


def test_the_memory_journal_on_a_cluster_is_warned(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        check_journal_placement({"journal.store": "memory"}, "remote")
    assert "repeats journaled calls" in caplog.text and "journal.store: postgres" in caplog.text


def test_invalid_options_name_their_key() -> None:
    with pytest.raises(ValueError, match="journal.sqlite.shared"):
        check_journal_placement({"journal.sqlite.path": "/shared/j.db", "journal.sqlite.shared": "perhaps"}, "remote")


def test_the_target_is_read_from_the_pyflink_environment() -> None:
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    assert execution_target(env) == "local"  # a script run on its own: the mini-cluster
    remote = Configuration()
    remote.set_string("execution.target", "remote")  # what `flink run` sets (its -t, default remote)
    env.configure(remote)
    try:
        assert execution_target(env) == "remote"
        with pytest.raises(JournalPlacementError):
            check_journal_placement({}, execution_target(env))
    finally:
        local = Configuration()
        local.set_string("execution.target", "local")
        env.configure(local)
