"""A TaskManager killed mid-run on a standalone cluster: exactly one output
per input, and no journaled model call made twice.

A cluster of its own (``tools/cluster.sh --dir`` under tmp: a JobManager and
3 TaskManagers x 1 slot, so a spare slot takes over the killed one's work).
On it the review agent runs over the 2,700 shared reviews
(``../shared/data/product_reviews.jsonl``) at parallelism 2, thread mode,
with the PostgreSQL journal (``FLINK_AGENTS_POSTGRES_DSN``), checkpoints
every second, a fixed-delay restart strategy with many attempts (the first
restarts go to the dead TaskManager's slot, registered until its heartbeats
fail, and fail), a watched input directory (unbounded: its source tasks stay
connected to the agent's, so the kill fails the job at once; a finished
bounded source left the failover to the 50 s heartbeat timeout) and a
``FileSink`` committing at checkpoints. The model is a scripted
OpenAI-compatible server counting the requests.

About 70 s on the 2-core development machine lightly loaded (cluster start
16 to 20 s, the first committed output 16 to 29 s after submission, new
attempts 7 to 9 s after the kill: the surviving subtask, waiting on runs
whose requests are held, is cancelled at once rather than after the model
timeout), about twice that with a test suite beside it.

Mid-run, after a checkpoint completed and outputs were committed, the model
server stops admitting requests (held, not counted); once every admitted
request was answered (and so journaled) a TaskManager running the job is
killed with SIGKILL. The requests held at that moment belong to attempts
that die with the failover: they stay unanswered and uncounted (a call never
answered is not a journaled call). Requests are admitted again once every
subtask runs a new attempt (held ones that arrived after those attempts were
deployed are admitted too: a restart deploys new attempts only after all old
ones ended). Then, the outputs committed and the job cancelled:

- the job finishes with exactly one committed output per review, each
  product's running count and mean as without a failure (the outputs after
  the restored checkpoint were not committed twice, the ones before it not
  lost);
- the model server counted exactly 2,700 requests, one per review: every
  call answered before the kill was replayed from the journal after the
  restore, none asked again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from flink_agents.jobs.review_records import read_reviews
from tests.support.scripted_openai_server import ScriptedChatServer
from tests.support.scripted_reviews import committed_outputs, expected_review_outputs, scripted_review_reply
from tests.support.standalone_cluster import (
    REPO_ROOT,
    StandaloneCluster,
    completed_checkpoints,
    job_subtasks,
    taskmanager_pids_of_job,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

SHARED_REVIEWS = REPO_ROOT.parent / "shared" / "data" / "product_reviews.jsonl"
OPENAI_KEY = "test-key-cluster-failover"
MODEL_LATENCY_S = 0.02  # the busiest product's 331 reviews, one after another: >= 6.6 s of model time
RESTART_DELAY_S = 2

# The review agent over a watched directory of reviews, outputs to files committed
# at checkpoints; every operator has a uid. The journal on PostgreSQL.
FAILOVER_JOB = '''
import argparse, json

from pyflink.common import Configuration, Duration, Encoder, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import (
    BucketAssigner, FileSink, FileSource, RollingPolicy, StreamFormat)

from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, product_id_of

parser = argparse.ArgumentParser()
for name in ("--input-dir", "--output-dir", "--dsn", "--job-id", "--base-url", "--execution-mode"):
    parser.add_argument(name)
parser.add_argument("--parallelism", type=int)
parser.add_argument("--restart-delay-s", type=int)
args = parser.parse_args()
config = Configuration()
config.set_string("python.execution-mode", args.execution_mode)
config.set_string("restart-strategy.type", "fixed-delay")
# Generous: a restart right after the kill is deployed to the dead
# TaskManager's slot (still registered until its heartbeats fail) and fails.
config.set_string("restart-strategy.fixed-delay.attempts", "30")
config.set_string("restart-strategy.fixed-delay.delay", f"{args.restart_delay_s} s")
env = StreamExecutionEnvironment.get_execution_environment(config)
env.set_parallelism(args.parallelism)
env.enable_checkpointing(1_000)
agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{
    "journal.store": "postgres", "journal.postgres.dsn": args.dsn, "job-identifier": args.job_id})
source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.input_dir)
          .monitor_continuously(Duration.of_millis(200)).build())
lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "reviews").uid("review-failover:source")
reviews = lines.map(json.loads, output_type=Types.PICKLED_BYTE_ARRAY()).name("decode").uid("review-failover:decode")
agent = ReviewAnalysisAgent("openai:scripted", args.base_url, timeout_s=60.0, max_retries=0)
outputs = agents_env.from_datastream(reviews, product_id_of, key_type=Types.STRING()).apply(agent).to_datastream()
sink = (FileSink.for_row_format(args.output_dir, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()).build())
(outputs.map(json.dumps, output_type=Types.STRING()).name("encode").uid("review-failover:encode")
 .sink_to(sink).name("outputs").uid("review-failover:outputs"))
env.execute("review-failover")
'''


class _Held(ConnectionResetError):
    """A request held at the closed gate, never admitted."""


class GatedChatServer(ScriptedChatServer):
    """The scripted server with a gate: while closed, arriving requests are
    held before they are counted; those held while closed stay unanswered
    and uncounted for good (``held``), even after the gate opens again."""

    def __init__(self, latency_s: float) -> None:
        super().__init__(latency_s=latency_s)
        self._gate = threading.Condition()
        self._closed = False
        self._admit_after = float("inf")
        self._stopping = False
        self.held = 0  # requests held for good
        self.answered = 0

    def close_gate(self) -> None:
        with self._gate:
            self._closed = True

    def open_gate(self, admit_after: float) -> None:
        """Admit new requests, and the held ones that arrived after
        ``admit_after`` (``time.time()``); the others stay held for good."""
        with self._gate:
            self._closed = False
            self._admit_after = admit_after
            self._gate.notify_all()

    def _record(self, exchange: Any) -> int:
        with self._gate:
            if self._closed:
                arrived = time.time()
                self._gate.wait_for(lambda: not self._closed or self._stopping)
                if self._stopping or arrived <= self._admit_after:
                    self.held += 1
                    self._gate.wait_for(lambda: self._stopping)
                    raise _Held()  # the connection is closed unanswered
            return super()._record(exchange)  # under the gate's lock: counted before a close_gate returns

    def _leave(self) -> None:
        super()._leave()
        with self._lock:
            self.answered += 1

    def settled(self) -> bool:
        """Every counted request has had its latency (its reply follows at once)."""
        with self._lock:
            return self.answered == len(self.requests)

    def stop(self) -> None:
        with self._gate:
            self._stopping = True
            self._gate.notify_all()
        super().stop()


def _request_review(body: Dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m.get("role") == "user")


@pytest.fixture(scope="module")
def postgres_dsn() -> str:
    dsn = os.environ.get("FLINK_AGENTS_POSTGRES_DSN")
    if not dsn:
        if os.environ.get("CI") == "true":
            pytest.fail("FLINK_AGENTS_POSTGRES_DSN is not set (CI: start one with tools/postgres.sh)")
        pytest.skip(os.environ.get("FLINK_AGENTS_POSTGRES_UNAVAILABLE")
                    or "FLINK_AGENTS_POSTGRES_DSN is not set: start a server with tools/postgres.sh and export its DSN")
    return dsn


@pytest.fixture(scope="module")
def shared_reviews() -> List[Dict[str, Any]]:
    if not SHARED_REVIEWS.is_file():
        # As every test over the shared data (tests/conftest.py): the data set
        # is checked out beside the repo, or not; the repo does not ship it.
        pytest.skip(f"the shared reviews ({SHARED_REVIEWS}) are absent: the failover test runs over them")
    return read_reviews(SHARED_REVIEWS).reviews


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres_dsn: str, shared_reviews) -> Iterator[StandaloneCluster]:
    """Its own cluster (not the session one of test_standalone_cluster_e2e):
    3 TaskManagers x 1 slot, one spare for the failover."""
    directory = tmp_path_factory.mktemp("failover-cluster")
    started = StandaloneCluster.start(directory, taskmanagers=3, slots=1, env={
        "OPENAI_API_KEY": OPENAI_KEY,
        # The killed TaskManager's slot is freed once its heartbeats fail:
        # 10 s instead of Flink's 50 s default, so the restarts find the
        # spare slot sooner.
        "FLINK_CLUSTER_CONF": json.dumps({"heartbeat.interval": 1000, "heartbeat.timeout": 10000}),
    })
    print(f"\n[failover] cluster up at {started.rest_url} in {started.start_s:.1f} s")
    try:
        yield started
    finally:
        stopped = started.stop()
        assert stopped.returncode == 0, stopped.stderr


def _wait(condition: Any, timeout_s: float, what: str, cluster: StandaloneCluster, jid: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        state = cluster.rest(f"/jobs/{jid}")["state"]
        if state in ("FAILED", "CANCELED"):
            raise AssertionError(f"job {jid} is {state} while waiting for {what}\n{cluster.log_tail()}")
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout_s} s\n{cluster.log_tail()}")


def test_a_killed_taskmanager_repeats_no_model_call_and_no_output(
    cluster: StandaloneCluster, postgres_dsn: str, shared_reviews: List[Dict[str, Any]], tmp_path: Path,
) -> None:
    started = time.monotonic()
    reviews = shared_reviews
    job = tmp_path / "review_failover_job.py"
    job.write_text(FAILOVER_JOB, encoding="utf-8")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "reviews.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reviews), encoding="utf-8")
    outputs = tmp_path / "outputs"

    with GatedChatServer(latency_s=MODEL_LATENCY_S) as server:
        server.set_reply_fn(scripted_review_reply)
        done = cluster.flink(
            "run", "-d", "-py", str(job), "--input-dir", str(inbox), "--output-dir", str(outputs),
            "--dsn", postgres_dsn, "--job-id", f"review-failover-{uuid.uuid4().hex[:12]}",
            "--base-url", server.base_url, "--execution-mode", "thread", "--parallelism", "2",
            "--restart-delay-s", str(RESTART_DELAY_S), timeout_s=150,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + cluster.log_tail()
        jid = re.search(r"JobID ([0-9a-f]{32})", done.stdout).group(1)

        # Mid-run: a checkpoint completed and outputs were committed.
        _wait(lambda: completed_checkpoints(cluster, jid) >= 1 and len(committed_outputs(outputs)) >= 1,
              90, "checkpoint with committed outputs", cluster, jid)
        first_output_s = time.monotonic() - started
        server.close_gate()
        _wait(server.settled, 30, "answer to every admitted request", cluster, jid)
        time.sleep(1.0)  # each answer journaled (an autocommitted insert) right after it arrives
        admitted, committed = len(server.requests), len(committed_outputs(outputs))
        assert admitted < len(reviews), "the job ended before the kill: nothing failed over"
        victims = taskmanager_pids_of_job(cluster, jid)
        assert len(victims) == 2, f"the job's subtasks are not on 2 of the 3 TaskManagers: {victims}"
        os.kill(victims[0], signal.SIGKILL)
        killed_at = time.monotonic()
        print(f"\n[failover] killed TaskManager {victims[0]} after {admitted} requests, {committed} "
              f"committed outputs, {completed_checkpoints(cluster, jid)} checkpoints")

        # Admit requests again once every subtask runs a new attempt (the
        # old attempts' requests, held, stay uncounted). Held requests that arrived after the running attempts were deployed
        # (their first ones, within the polling lag) are admitted: a restart
        # deploys new attempts only once all old ones ended.
        running: List[Dict[str, Any]] = []

        def restarted() -> bool:
            running[:] = job_subtasks(cluster, jid)
            return all(s["attempt"] >= 1 and s["status"] == "RUNNING" for s in running)

        _wait(restarted, 120, "new running attempt of every subtask", cluster, jid)
        server.open_gate(admit_after=min(s["start-time"] for s in running) / 1000)
        recovered_s = time.monotonic() - killed_at
        # The surviving subtask waited on runs whose requests are held (never
        # answered): its cancellation must not wait for their 60 s timeout
        # (runtime.flink.task_cancellation; it did: 64 s, now 7 to 9 s).
        assert recovered_s < 45, f"new attempts only {recovered_s:.1f} s after the kill"

        try:
            _wait(lambda: len(committed_outputs(outputs)) >= len(reviews), 150, f"{len(reviews)} committed outputs",
                  cluster, jid)
            time.sleep(2.5)  # more checkpoints: a repeated output would be committed by now
        finally:
            cancelled = cluster.flink("cancel", jid, timeout_s=60)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        requests = [_request_review(body) for body in server.requests]
        held = server.held

    total_s = time.monotonic() - started
    print(f"[failover] first committed output {first_output_s:.1f} s after submission; "
          f"new attempts {recovered_s:.1f} s after the kill; {held} request(s) of the dying "
          f"attempts held; {len(requests)} requests counted; job {total_s:.1f} s")
    results = sorted(committed_outputs(outputs), key=lambda o: (o["id"], o["ts"]))
    keys = [(o["id"], o["ts"]) for o in results]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} output(s) repeated after the failover"
    assert len(results) == len(reviews), f"{len(results)} outputs for {len(reviews)} reviews"
    assert results == expected_review_outputs(reviews)
    asked = Counter(requests)
    want = Counter(json.dumps({"id": r["id"], "review": r["review"]}) for r in reviews)
    repeated = {review: n - want[review] for review, n in asked.items() if n > want[review]}
    assert not repeated, f"{sum(repeated.values())} journaled model call(s) made again after the failover"
    assert asked == want and len(requests) == len(reviews)
