"""Issue 14, part 5: a failed Flink job names its root Python cause in one
line, for failures outside actions too (before: ``Py4JJavaError: An error
occurred while calling o141.hasNext`` and a Java trace of hundreds of lines,
with the Python exception somewhere inside).

In process (here: loopback) mode through ``AgentsExecutionEnvironment.execute``:
a PostgreSQL journal that cannot be reached, an input record keyed state
cannot keep, a decode step that fails before the agent, and an action that
fails (its ``ActionFailed`` text unchanged). In thread mode through the
review job's command line: a journal that cannot be opened.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from py4j.protocol import Py4JJavaError

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, product_id_of
from tests.support.flink_jobs import child_environment, free_port, mini_cluster_env

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE = REPO_ROOT / "jobs" / "data" / "sample_reviews.jsonl"
GOOD = {"id": "B0GOOD0001", "review": "Works as described.", "ts": 1}


class Opaque:
    """Not something keyed state can keep."""


def _run(tmp_path: Path, lines: List[str], decode: Any = json.loads, **config: Any) -> None:
    """Run the review agent over ``lines`` (decoded by ``decode``) on the
    mini-cluster, no restarts, through ``AgentsExecutionEnvironment.execute``."""
    from pyflink.common import Types

    env = mini_cluster_env(1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db"), **config}
    )
    reviews = env.from_collection(lines, type_info=Types.STRING()).map(decode, output_type=Types.PICKLED_BYTE_ARRAY())
    outputs = agents_env.from_datastream(reviews, product_id_of, key_type=Types.STRING())
    outputs.apply(ReviewAnalysisAgent()).to_datastream().print()
    agents_env.execute("failure-messages")


def _failure(tmp_path: Path, lines: List[str], decode: Any = json.loads, **config: Any) -> Py4JJavaError:
    with pytest.raises(Py4JJavaError) as failure:
        _run(tmp_path, lines, decode, **config)
    return failure.value


def _assert_names_the_cause(error: Py4JJavaError, python_type: str) -> str:
    """The error's one line starts with the Python exception's type; the
    Java trace stays available. Returns the line."""
    line = str(error)
    assert "\n" not in line, line[:3000]
    assert line.startswith(python_type.rsplit(".", 1)[-1] + ": "), line[:3000]
    assert "hasNext" not in line and "java." not in line, line
    assert getattr(error, "cause_type") == python_type
    assert isinstance(error.__cause__, Py4JJavaError)  # the original, with the whole trace
    assert "Caused by:" in getattr(error, "java_trace")
    return line


@pytest.mark.timeout(300)
def test_an_unreachable_postgres_journal_fails_the_job_naming_the_store_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    error = _failure(
        tmp_path, [json.dumps(GOOD)],
        **{"journal.store": "postgres", "journal.postgres.dsn": f"postgresql://agent@127.0.0.1:{port}/journal",
           # A refused connection is retried as an outage (10 s by default,
           # stores/retry.py); 1 s keeps the message and the attempts' note.
           "journal.retry.timeout_s": "1"},
    )
    line = str(error)
    assert "\n" not in line and "hasNext" not in line, line[:3000]
    assert getattr(error, "cause_type").startswith("flink_agents.stores."), line
    assert "127.0.0.1" in line and str(port) in line and "refused" in line, line


@pytest.mark.timeout(300)
def test_a_record_keyed_state_cannot_keep_fails_the_job_naming_key_record_and_field(tmp_path: Path) -> None:
    def decode(text: str) -> Dict[str, Any]:
        review = json.loads(text)
        if review["ts"] == 2:
            review["attachment"] = Opaque()
        return review

    lines = [json.dumps(GOOD), json.dumps({**GOOD, "ts": 2})]
    line = _assert_names_the_cause(
        _failure(tmp_path, lines, decode), "flink_agents.runtime.errors.InputRecordError"
    )
    assert "input record #1 of key 'B0GOOD0001' cannot be kept in keyed state: record.attachment" in line


@pytest.mark.timeout(300)
def test_a_decode_step_failing_before_the_agent_fails_the_job_naming_the_error(tmp_path: Path) -> None:
    line = _assert_names_the_cause(
        _failure(tmp_path, [json.dumps(GOOD), '{"id": "B0CUT", "review": "cut off']), "json.decoder.JSONDecodeError"
    )
    assert line.startswith("JSONDecodeError: Unterminated string starting at: line 1 column 27"), line


@pytest.mark.timeout(300)
def test_a_failing_action_still_names_action_key_and_record(tmp_path: Path) -> None:
    line = _assert_names_the_cause(
        _failure(tmp_path, [json.dumps({**GOOD, "ts": "yesterday"})]), "flink_agents.runtime.errors.ActionFailed"
    )
    assert line.startswith(
        "ActionFailed: action 'process_input' failed on key 'B0GOOD0001', record #0: "
        "ValidationError: 1 validation error for ProductReview ts Input should be a valid integer"
    ), line


@pytest.mark.timeout(300)
def test_the_job_command_names_a_journal_it_cannot_open_in_one_line(tmp_path: Path) -> None:
    """Thread mode (the job's default: Python inside the JVM), through the
    job's own collection of outputs; the SQLite journal beside the output
    is a directory, so the first journal read fails outside any action."""
    output = tmp_path / "out.jsonl"
    output.with_name(output.name + ".journal.db").mkdir()
    reviews = tmp_path / "reviews.jsonl"
    reviews.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:2]))
    done = subprocess.run(
        [sys.executable, "-m", "flink_agents.jobs.review_analysis", "--input", str(reviews), "--output", str(output),
         "--runner", "flink", "--execution-mode", "thread", "--parallelism", "1", "--restart-attempts", "0"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=child_environment(),
    )
    assert done.returncode == 1, done.stderr[-3000:]
    failed = [line for line in done.stderr.splitlines() if line.startswith("error: the job failed: ")]
    assert len(failed) == 1, done.stderr[-3000:]
    assert "hasNext" not in failed[0] and "Py4JJavaError" not in failed[0], failed[0]
    assert "JournalStoreError" in failed[0] and "is a directory" in failed[0], failed[0]
    assert not output.exists()
