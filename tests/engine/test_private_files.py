"""What grants access stays private (issue 27, section 2): every file the
runtime and the bundled jobs create that holds prompts, answers or callback
ids is mode 0600, in directories made 0700, whatever the umask, and never
written through a symbolic link; the event log's default directory is this
user's own, and a directory another user could fill is refused.

The SQLite journal is also the callback store (one file, ``callbacks``
table), so its modes cover both. Everything runs under umask 022 (the usual
one, which made these files 0644 before) unless a test sets another.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterator

import pytest

from flink_agents._private_files import (
    UnsafePathError,
    create_private_file,
    make_private_dirs,
    open_private,
    replace_when_done,
)
from flink_agents.api.agents.agent import Agent
from flink_agents.api.core_options import AgentConfigOptions
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")

LOG_NAME = "events-local-local-0.log"  # events-{jobId}-{taskName}-{subtaskId}.log of the local runner


def _mode(path: Path) -> str:
    return f"{stat.S_IMODE(os.lstat(path).st_mode):04o}"


def modes_in(directory: str) -> Dict[str, str]:
    """Every file of ``directory`` and its mode, as the job sees them."""
    return {name: _mode(Path(directory, name)) for name in sorted(os.listdir(directory))}


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


class ModesAgent(Agent):
    """Outputs the modes of the files in the directory its input names, read
    inside a journaled call (so while the job holds the journal open)."""

    @action(InputEvent)
    @staticmethod
    def look(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output=ctx.durable_execute(modes_in, event.input)))


class EchoAgent(Agent):
    @action(InputEvent)
    @staticmethod
    def echo(event: InputEvent, ctx: RunnerContext) -> None:
        ctx.send_event(OutputEvent(output={"answer": f"prompt {event.input}"}))


def _run(agent: Agent, records: list, **config: object) -> list:
    env = AgentsExecutionEnvironment.get_execution_environment(**config)
    collected = env.from_list(records).apply(agent).to_list()
    env.execute()
    return collected


# ---- the SQLite journal (and callback store) ---------------------------------------------


def test_the_journal_and_its_wal_and_shm_are_0600_in_a_0700_directory_after_a_local_job(tmp_path: Path) -> None:
    directory = tmp_path / "state" / "journal"  # missing: the store makes both levels
    journal = directory / "job.db"

    (output,) = _run(ModesAgent(), [{"key": "k", "value": str(directory)}],
                     **{"journal.store": "sqlite", "journal.sqlite.path": str(journal)})

    # While the job had it open, SQLite's own -wal and -shm existed beside it.
    assert output["k"] == {"job.db": "0600", "job.db-shm": "0600", "job.db-wal": "0600"}
    assert _mode(journal) == "0600"
    assert _mode(directory) == "0700" and _mode(directory.parent) == "0700"
    assert _mode(tmp_path) == "0700"  # an existing directory is left as it was


def test_the_journal_is_created_0600_whatever_the_umask(tmp_path: Path) -> None:
    from flink_agents.stores import SQLiteJournalStore

    os.umask(0o000)
    store = SQLiteJournalStore(tmp_path / "loose" / "j.db")
    try:
        store.count_entries()
        assert modes_in(str(tmp_path / "loose")) == {"j.db": "0600", "j.db-shm": "0600", "j.db-wal": "0600"}
        assert _mode(tmp_path / "loose") == "0700"
    finally:
        store.close()


def test_a_journal_path_that_is_a_link_to_nothing_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    from flink_agents.stores import JournalStoreError, JournalUnavailableError, SQLiteJournalStore, StoreRetry

    target = tmp_path / "planted" / "j.db"
    target.parent.mkdir()
    (tmp_path / "j.db").symlink_to(target)
    store = SQLiteJournalStore(tmp_path / "j.db", retry=StoreRetry(timeout_s=0))

    with pytest.raises(JournalStoreError, match="is a symbolic link to .*planted/j.db, which does not exist") as raised:
        store.count_entries()
    assert not isinstance(raised.value, JournalUnavailableError)  # terminal: no retry helps
    assert not target.exists()


def test_an_existing_journal_others_can_read_is_opened_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from flink_agents.stores import SQLiteJournalStore

    journal = tmp_path / "old.db"
    journal.touch(mode=0o644)  # as a release before this one made it
    store = SQLiteJournalStore(journal)
    try:
        store.count_entries()
    finally:
        store.close()
    assert f"the journal {journal} has mode 0644: other users can read" in caplog.text
    assert _mode(journal) == "0644"  # left as it is: it may be shared on purpose


# ---- the event log -----------------------------------------------------------------------


def test_event_log_files_are_0600_in_a_0700_directory(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs" / "events"
    _run(EchoAgent(), [{"key": "k", "value": "secret question"}], baseLogDir=str(log_dir))

    assert modes_in(str(log_dir)) == {LOG_NAME: "0600"}
    assert "secret question" in (log_dir / LOG_NAME).read_text()
    assert _mode(log_dir) == "0700" and _mode(log_dir.parent) == "0700"


def test_the_default_event_log_directory_is_this_users_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _run(EchoAgent(), [{"key": "k", "value": 1}], eventLoggerType="file")

    own = tmp_path / f"flink-agents-{os.geteuid()}"
    assert not (tmp_path / "flink-agents").exists()  # 0.3.1's shared name
    assert _mode(own) == "0700" and modes_in(str(own)) == {LOG_NAME: "0600"}


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "to-nothing"])
def test_a_link_planted_in_the_event_log_directory_is_refused_and_its_target_untouched(
    tmp_path: Path, dangling: bool
) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir(mode=0o700)
    target = tmp_path / "victim.txt"
    if not dangling:
        target.write_text("original\n")
        target.chmod(0o644)
    (log_dir / LOG_NAME).symlink_to(target)

    with pytest.raises(UnsafePathError, match=f"{LOG_NAME} is a symbolic link .*victim.txt.*refused"):
        _run(EchoAgent(), [{"key": "k", "value": "secret"}], baseLogDir=str(log_dir))

    if dangling:
        assert not target.exists()
    else:
        assert target.read_text() == "original\n" and _mode(target) == "0644"


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770], ids=["world", "world-sticky", "group"])
@pytest.mark.parametrize("configured", [True, False], ids=["baseLogDir", "default"])
def test_a_pre_created_log_directory_others_can_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int, configured: bool
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / ("shared" if configured else f"flink-agents-{os.geteuid()}")
    shared.mkdir()
    shared.chmod(mode)  # pre-created by someone, before the job
    config = {"baseLogDir": str(shared)} if configured else {"eventLoggerType": "file"}

    with pytest.raises(UnsafePathError, match=rf"{shared} is writable by .* \(mode {mode:04o}\)"):
        _run(EchoAgent(), [{"key": "k", "value": "secret"}], **config)
    assert os.listdir(shared) == []


@pytest.mark.parametrize("to_nothing", [False, True], ids=["to-a-directory-of-ours", "to-nothing"])
def test_a_link_at_the_default_log_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, to_nothing: bool
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ours = tmp_path / "ours"
    if not to_nothing:
        ours.mkdir(mode=0o700)
    (tmp_path / f"flink-agents-{os.geteuid()}").symlink_to(ours)  # a name in the shared <tmp>: anyone's

    with pytest.raises(UnsafePathError, match=rf"flink-agents-{os.geteuid()} is a symbolic link .*ours.*refused"):
        _run(EchoAgent(), [{"key": "k", "value": "secret"}], eventLoggerType="file")
    assert not ours.exists() or os.listdir(ours) == []


def test_a_configured_log_directory_may_be_the_operators_own_link(tmp_path: Path) -> None:
    (tmp_path / "volume").mkdir(mode=0o700)
    (tmp_path / "logs").symlink_to(tmp_path / "volume")
    _run(EchoAgent(), [{"key": "k", "value": 1}], baseLogDir=str(tmp_path / "logs"))
    assert modes_in(str(tmp_path / "volume")) == {LOG_NAME: "0600"}


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a directory away needs root")
def test_a_log_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)

    with pytest.raises(UnsafePathError, match=rf"{theirs} is owned by another user \(uid 65534"):
        _run(EchoAgent(), [{"key": "k", "value": "secret"}], baseLogDir=str(theirs))


def test_an_event_log_file_left_readable_by_others_is_made_private(tmp_path: Path) -> None:
    (tmp_path / LOG_NAME).write_text("{}\n")
    (tmp_path / LOG_NAME).chmod(0o644)
    env = AgentsExecutionEnvironment.get_execution_environment()
    env.get_config().set(AgentConfigOptions.BASE_LOG_DIR, str(tmp_path))  # as 0.3.1 code sets it
    env.from_list([{"key": "k", "value": 1}]).apply(EchoAgent()).to_list()
    env.execute()

    assert _mode(tmp_path / LOG_NAME) == "0600"
    assert (tmp_path / LOG_NAME).read_text().startswith("{}\n")  # appended to, not emptied


# ---- job outputs -------------------------------------------------------------------------


def test_the_review_jobs_output_is_0600_in_a_0700_directory(tmp_path: Path) -> None:
    from flink_agents.jobs import review_analysis

    output = tmp_path / "out" / "review_analysis.jsonl"
    assert review_analysis.main(["--input", str(review_analysis.SAMPLE_INPUT), "--output", str(output),
                                 "--runner", "local"]) == 0

    assert json.loads(output.read_text().splitlines()[0])  # the model's answers
    assert modes_in(str(output.parent)) == {"review_analysis.jsonl": "0600"}
    assert _mode(output.parent) == "0700"


def test_a_job_output_replaces_a_link_at_its_path_without_writing_through_it(tmp_path: Path) -> None:
    from flink_agents.jobs.review_records import jsonl_output

    target = tmp_path / "victim.txt"
    target.write_text("original\n")
    output = tmp_path / "out.jsonl"
    output.symlink_to(target)

    with jsonl_output(output, 1, "test") as write:
        write({"answer": 1})

    assert not output.is_symlink() and output.read_text() == '{"answer": 1}\n' and _mode(output) == "0600"
    assert target.read_text() == "original\n"


def test_a_link_planted_at_a_job_outputs_partial_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    from flink_agents.jobs.review_records import jsonl_output

    target = tmp_path / "victim.txt"
    target.write_text("original\n")
    (tmp_path / "out.jsonl.partial").symlink_to(target)

    with pytest.raises(UnsafePathError, match=r"out\.jsonl\.partial is a symbolic link"):
        with jsonl_output(tmp_path / "out.jsonl", 1, "test") as write:
            write({"answer": 1})

    assert target.read_text() == "original\n"
    assert (tmp_path / "out.jsonl.partial").is_symlink() and not (tmp_path / "out.jsonl").exists()


def test_replace_when_done_keeps_the_earlier_file_when_the_block_fails(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    output.write_text("earlier\n")
    with pytest.raises(RuntimeError):
        with replace_when_done(output) as sink:
            sink.write("half")
            raise RuntimeError("the run failed")
    assert output.read_text() == "earlier\n" and sorted(os.listdir(tmp_path)) == ["out.jsonl"]


def test_the_shipping_claims_inbox_is_appended_privately(tmp_path: Path) -> None:
    from flink_agents.jobs.shipping_claims import file_claim

    inbox = tmp_path / "inbox.jsonl"
    file_claim(str(inbox), {"claim_id": "c1", "resolve_url": "http://127.0.0.1/cb/secret"})
    assert _mode(inbox) == "0600"
    (tmp_path / "planted.jsonl").symlink_to(tmp_path / "victim.txt")
    with pytest.raises(UnsafePathError):
        file_claim(str(tmp_path / "planted.jsonl"), {"claim_id": "c2"})
    assert not (tmp_path / "victim.txt").exists()


# ---- the helper itself -------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_files_are_0600_and_directories_0700_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    os.umask(umask)
    make_private_dirs(tmp_path / "a" / "b")
    os.close(open_private(tmp_path / "a" / "b" / "f", append=True))
    assert create_private_file(tmp_path / "a" / "b" / "g") is True
    assert create_private_file(tmp_path / "a" / "b" / "g") is False

    assert [_mode(tmp_path / "a"), _mode(tmp_path / "a" / "b")] == ["0700", "0700"]
    assert modes_in(str(tmp_path / "a" / "b")) == {"f": "0600", "g": "0600"}


def test_open_private_empties_unless_appending_and_refuses_what_is_not_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("old")
    with os.fdopen(open_private(path, append=True), "a") as sink:
        sink.write("+more")
    assert path.read_text() == "old+more"
    with os.fdopen(open_private(path), "w") as sink:
        sink.write("new")
    assert path.read_text() == "new"

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):  # neither blocks nor writes into it
        open_private(fifo, append=True)
