"""The jobs on a standalone Flink cluster, submitted as Flink users do.

One cluster for the session (``tools/cluster.sh``: a JobManager and one
TaskManager with 3 slots, from the apache-flink wheel's distribution). On
it: the review job by ``flink run -py`` in thread mode and by ``flink run
-pym ... -pyfs`` in process mode, each over the bundled sample with the
local model, outputs identical to the local runner's; the other bundled
jobs (triage, shipping claims, product QA) by ``flink run -py``, outputs as
on the local runner (the claims job's job-scoped ids aside); then the review agent
over an unbounded input with a slow scripted model and a file sink, stopped
with a savepoint mid-run at parallelism 2 and resumed from it at parallelism
3 with changed agent code, without ``--allowNonRestoredState``: every review
has exactly one output, each one after the restore from the new code, and
each product's running summary continues where the savepoint left it.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from flink_agents.jobs.review_analysis import SAMPLE_INPUT, ReviewAnalysisAgent, run_locally
from flink_agents.jobs.review_records import read_reviews
from flink_agents.runtime.flink.operator import HOST_SILENCE_S
from tests.support.flink_jobs import write_jsonl
from tests.support.scripted_openai_server import ScriptedChatServer
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.standalone_cluster import REPO_ROOT, StandaloneCluster
from tests.support.scripted_reviews import committed_outputs, expected_review_outputs, scripted_review_reply

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

OPENAI_KEY = "test-key-standalone-cluster"  # TaskManagers read it from their environment
SUBMIT_TIMEOUT_S = 150.0


@pytest.fixture(scope="session")
def trace_receiver() -> Iterator[OtlpReceiver]:
    """The OTLP receiver the cluster's TaskManagers export traces to."""
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, trace_receiver: OtlpReceiver) -> Iterator[StandaloneCluster]:
    directory = tmp_path_factory.mktemp("cluster")
    # Traces configured the OpenTelemetry way, in the TaskManagers' environment.
    tracing = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": trace_receiver.endpoint,
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "standalone-cluster",
               "OTEL_BSP_SCHEDULE_DELAY": "200"}
    started = StandaloneCluster.start(directory, taskmanagers=1, slots=3,
                                      env={"OPENAI_API_KEY": OPENAI_KEY, **tracing})
    print(f"\n[cluster] up at {started.rest_url} in {started.start_s:.1f} s")
    try:
        yield started
    finally:
        pids = [started.state.get("JM_PID", ""), *started.state.get("TM_PIDS", "").split()]
        stopped = started.stop()
        assert stopped.returncode == 0, stopped.stderr
        alive = [pid for pid in pids if pid and Path(f"/proc/{pid}/cmdline").exists()
                 and str(directory) in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")]
        assert not alive, f"tools/cluster.sh stop left {alive} running"


def _sorted_outputs(path: Path) -> List[Dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return sorted(lines, key=lambda o: (o["id"], o["ts"]))


@pytest.fixture(scope="module")
def local_outputs(tmp_path_factory: pytest.TempPathFactory) -> List[Dict[str, Any]]:
    """The local runner's outputs over the sample (journal in a tmp dir)."""

    directory = tmp_path_factory.mktemp("local")
    here = os.getcwd()
    os.chdir(directory)  # the local runner's default SQLite journal lands here
    try:
        outputs = run_locally(read_reviews(SAMPLE_INPUT).reviews, ReviewAnalysisAgent())
    finally:
        os.chdir(here)
    return sorted(outputs, key=lambda o: (o["id"], o["ts"]))


def _submit(cluster: StandaloneCluster, *args: str) -> Tuple[float, subprocess.CompletedProcess]:
    """``flink run ARGS`` to its end; returns its wall time and the run.

    Raises:
        AssertionError: It failed; the message has its output and the
            cluster's log tails.
    """
    started = time.monotonic()
    done = cluster.flink("run", *args, timeout_s=SUBMIT_TIMEOUT_S)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, (
        f"flink run {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n"
        f"{cluster.log_tail()}"
    )
    return elapsed, done


def test_cluster_status_and_an_idempotent_start(cluster: StandaloneCluster) -> None:
    status = cluster.status()
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"rest: {cluster.rest_url}" in status.stdout and "answers: yes" in status.stdout
    overview = cluster.rest("/overview")
    assert (overview["taskmanagers"], overview["slots-total"]) == (1, 3)
    again = StandaloneCluster.start(cluster.directory, taskmanagers=1, slots=3, env=cluster.env)
    assert again.rest_url == cluster.rest_url  # reported, not started twice
    other_shape = subprocess.run(
        ["bash", str(REPO_ROOT / "tools" / "cluster.sh"), "start", "--dir", str(cluster.directory), "--slots", "2"],
        env=cluster.env, capture_output=True, text=True, timeout=60,
    )
    assert other_shape.returncode == 1 and "stop it first" in other_shape.stderr


def test_flink_run_py_in_thread_mode_matches_the_local_runner(cluster, local_outputs, tmp_path,
                                                              trace_receiver) -> None:
    """The job's default execution mode (thread): the TaskManager's embedded
    interpreter finds pemja and the project through the python.pythonpath
    the runtime set; the journal is the default SQLite one beside the output.
    The TaskManager's OTEL_* environment sends each record's trace to the
    test's receiver."""
    spans_before = len(trace_receiver.spans)
    output = tmp_path / "thread.jsonl"
    elapsed, done = _submit(cluster, "-py", str(REPO_ROOT / "jobs" / "review_analysis.py"),
                      "--output", str(output), "--parallelism", "2", "--restart-attempts", "0")
    print(f"\n[cluster] flink run -py (thread, parallelism 2, 60 reviews): {elapsed:.1f} s")
    # tools/cluster.sh sets the cluster up for thread mode, and the job saw it.
    assert "running in process mode" not in done.stdout + done.stderr
    assert _sorted_outputs(output) == local_outputs
    assert (tmp_path / "thread.jsonl.journal.db").is_file()
    jobs = [job for job in cluster.jobs() if job["name"] == "review-analysis"]
    assert jobs and all(job["state"] == "FINISHED" for job in jobs)
    deadline = time.monotonic() + 15  # a finished job's operator flushed its spans at close
    while time.monotonic() < deadline:
        roots = [s for s in trace_receiver.spans[spans_before:] if s.parent_id is None]
        if len(roots) >= len(local_outputs):
            break
        time.sleep(0.2)
    spans = trace_receiver.spans[spans_before:]
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == len(local_outputs), f"{len(roots)} traces for {len(local_outputs)} records"
    assert {s.service_name for s in spans} == {"standalone-cluster"}
    assert len({s.trace_id for s in roots}) == len(roots)
    assert sum(1 for s in spans if s.name.startswith("chat ")) >= len(local_outputs)


def _without_job_scoped_ids(record: Any) -> Any:
    """A record without the ids a job derives from its own id (the claims
    job's claim ids): they differ between any two runs, by design."""
    if isinstance(record, dict):
        return {k: _without_job_scoped_ids(v) for k, v in record.items() if k not in ("claim_id", "claim_number")}
    return record


@pytest.mark.parametrize("job", ["review_triage", "shipping_claims", "product_qa"])
def test_the_other_bundled_jobs_run_under_flink_run_py(cluster, tmp_path, job) -> None:
    """Each bundled job as a file in thread mode, over its bundled sample,
    outputs as on the local runner."""
    import importlib

    module = importlib.import_module(f"flink_agents.jobs.{job}")
    # product_qa defaults to ../shared/data when checked out beside the repo.
    sample = ["--reviews", str(module.SAMPLE_REVIEWS), "--questions", str(module.SAMPLE_QUESTIONS)] if job == "product_qa" else []
    local, submitted = tmp_path / "local.jsonl", tmp_path / "cluster.jsonl"
    here = os.getcwd()
    os.chdir(tmp_path)  # the local runner's default journal lands here
    try:
        assert module.main(["--runner", "local", "--output", str(local), *sample]) == 0
    finally:
        os.chdir(here)
    elapsed, _ = _submit(cluster, "-py", str(REPO_ROOT / "jobs" / f"{job}.py"),
                         "--output", str(submitted), *sample)
    print(f"\n[cluster] flink run -py {job} (thread): {elapsed:.1f} s")

    def read(path: Path) -> List[str]:
        lines = path.read_text(encoding="utf-8").splitlines()
        return sorted(json.dumps(_without_job_scoped_ids(json.loads(line)), sort_keys=True) for line in lines)

    assert read(submitted) == read(local) and read(local)


# A user's own job package, shipped to the client and the workers with
# -pyfs; flink_agents itself comes from the workers' interpreter.
USER_JOB = """
from flink_agents.jobs.review_analysis import main

if __name__ == "__main__":
    main()
"""


def test_flink_run_pym_in_process_mode_matches_the_local_runner(cluster, local_outputs, tmp_path) -> None:
    package = tmp_path / "shipped" / "my_reviews"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "job.py").write_text(USER_JOB)
    output = tmp_path / "process.jsonl"
    # -pyfs puts the directory itself on the path: ship the package's parent.
    elapsed, _ = _submit(cluster, "-pym", "my_reviews.job", "-pyfs", str(package.parent),
                      "--execution-mode", "process", "--output", str(output), "--parallelism", "2",
                      "--restart-attempts", "0")
    print(f"\n[cluster] flink run -pym (process, parallelism 2, 60 reviews): {elapsed:.1f} s")
    assert _sorted_outputs(output) == local_outputs


# --- stop with a savepoint, resume at another parallelism -------------------

# The review agent over a watched directory (unbounded: a bounded input would
# reach its end, whose final watermark waits for all work, before a savepoint
# could be taken mid-run), its outputs to files committed at checkpoints.
# Not execute_and_collect: Flink's collect sink restored from a savepoint
# fails a new client ("userVisibleTail should not be larger than offset"),
# so a job meant to be resumed writes to a sink. Every operator has its uid.
STREAM_JOB = '''
import argparse, json

from pyflink.common import Duration, Encoder, Types, WatermarkStrategy
from pyflink.datastream.connectors.file_system import (
    BucketAssigner, FileSink, FileSource, RollingPolicy, StreamFormat)

from flink_agents.api.agents.agent import STRUCTURED_OUTPUT
from flink_agents.api.decorators import action
from flink_agents.api.events.chat_event import ChatResponseEvent
from flink_agents.api.events.event import OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.jobs.review_analysis import ReviewAnalysisAgent, flink_environment, product_id_of

parser = argparse.ArgumentParser()
for name in ("--input-dir", "--output-dir", "--journal", "--base-url", "--execution-mode"):
    parser.add_argument(name)
parser.add_argument("--parallelism", type=int)
parser.add_argument("--agent-version", type=int, default=1)
args = parser.parse_args()

if args.agent_version == 2:
    # The upgrade: changed code in the same agent class (the operator's uid
    # is the class name); a changed action, reading the restored memory.
    class ReviewAnalysisAgent(ReviewAnalysisAgent):
        @action(ChatResponseEvent)
        @staticmethod
        def process_chat_response(event, ctx):
            review = ctx.sensory_memory.get("review")
            analysis = event.response.extra_args[STRUCTURED_OUTPUT]
            summary = ctx.short_term_memory
            seen = (summary.get("reviews_seen") or 0) + 1
            score_sum = (summary.get("score_sum") or 0) + analysis.score
            summary.set("reviews_seen", seen)
            summary.set("score_sum", score_sum)
            ctx.send_event(OutputEvent(output={
                "id": review["id"], "ts": review["ts"], "score": analysis.score, "reasons": analysis.reasons,
                "reviews_seen": seen, "mean_score": round(score_sum / seen, 3), "agent_version": 2,
            }))
env = flink_environment(args.parallelism, 1_000, args.execution_mode, restart_attempts=0)
agents_env = AgentsExecutionEnvironment.get_execution_environment(
    env, **{"journal.sqlite.path": args.journal, "job-identifier": "review-stream"})
source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.input_dir)
          .monitor_continuously(Duration.of_millis(200)).build())
lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "reviews").uid("review-stream:source")
reviews = lines.map(json.loads, output_type=Types.PICKLED_BYTE_ARRAY()).name("decode").uid("review-stream:decode")
agent = ReviewAnalysisAgent("openai:scripted", args.base_url, timeout_s=60.0, max_retries=0)
outputs = agents_env.from_datastream(reviews, product_id_of, key_type=Types.STRING()).apply(agent).to_datastream()
sink = (FileSink.for_row_format(args.output_dir, Encoder.simple_string_encoder())
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()).build())
(outputs.map(json.dumps, output_type=Types.STRING()).name("encode").uid("review-stream:encode")
 .sink_to(sink).name("outputs").uid("review-stream:outputs"))
env.execute("review-stream")
'''

MODEL_LATENCY_S = 1.5  # per request; 6 products, one review of a product at a time: ~15 s of work


def _wait_for_outputs(directory: Path, count: int, cluster: StandaloneCluster, jid: str, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        committed = len(committed_outputs(directory))
        if committed >= count:
            return committed
        state = cluster.rest(f"/jobs/{jid}")["state"]
        if state in ("FAILED", "CANCELED", "FINISHED"):
            raise AssertionError(f"job {jid} is {state} with {committed} output(s)\n{cluster.log_tail()}")
        time.sleep(0.2)
    raise AssertionError(f"{len(committed_outputs(directory))} of {count} outputs within {timeout_s} s")


def test_stop_with_savepoint_and_resume_at_parallelism_3_with_changed_agent_code(cluster, tmp_path) -> None:
    reviews = read_reviews(SAMPLE_INPUT).reviews
    job = tmp_path / "review_stream_job.py"
    job.write_text(STREAM_JOB, encoding="utf-8")
    inbox, outputs = tmp_path / "inbox", tmp_path / "outputs"
    inbox.mkdir()
    write_jsonl(inbox / "reviews.jsonl", reviews)

    def submit(parallelism: int, version: int, *restore: str) -> str:
        """``flink run -d``: returns the job id."""
        done = cluster.flink(
            "run", "-d", *restore, "-py", str(job), "--input-dir", str(inbox), "--output-dir", str(outputs),
            "--journal", str(tmp_path / "journal.db"), "--base-url", server.base_url,
            "--execution-mode", "thread", "--parallelism", str(parallelism), "--agent-version", str(version),
            timeout_s=SUBMIT_TIMEOUT_S,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return re.search(r"JobID ([0-9a-f]{32})", done.stdout).group(1)

    with ScriptedChatServer(latency_s=MODEL_LATENCY_S) as server:
        server.set_reply_fn(scripted_review_reply)
        first = submit(2, 1)
        _wait_for_outputs(outputs, 1, cluster, first, timeout_s=90)
        started = time.monotonic()
        stopped = cluster.flink("stop", "--savepointPath", (tmp_path / "savepoints").as_uri(), first, timeout_s=90)
        stop_s = time.monotonic() - started
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr + cluster.log_tail()
        savepoint = re.search(r"Savepoint completed\. Path: (\S+)", stopped.stdout).group(1)
        before = len(committed_outputs(outputs))
        assert 1 <= before < len(reviews), f"the savepoint was not taken mid-run ({before} outputs)"
        print(f"\n[cluster] stop-with-savepoint after {before} of {len(reviews)} outputs: {stop_s:.1f} s")

        # The stopped job's runs in progress finish (their results are
        # journaled); none starts after it stopped calling (thread mode
        # never closes it: runtime.scheduling.key_runner, host_silence_s).
        at_stop = len(server.requests)
        time.sleep(HOST_SILENCE_S + MODEL_LATENCY_S + 1.5)
        settled = len(server.requests)
        time.sleep(2.0)
        assert len(server.requests) == settled, "the stopped job went on calling the model"
        # Per product: the run in flight, and those started until the
        # runner noticed its operator's silence.
        bound = 6 * (math.ceil(HOST_SILENCE_S / MODEL_LATENCY_S) + 1)
        assert settled - at_stop <= bound, f"{settled - at_stop} requests after the stop (at most {bound})"
        print(f"[cluster] model requests: {at_stop} at the stop, {settled} when the stopped job settled")

        second = submit(3, 2, "-s", savepoint)  # parallelism 2 -> 3, v2 code; no --allowNonRestoredState
        try:
            _wait_for_outputs(outputs, len(reviews), cluster, second, timeout_s=120)
            time.sleep(3)  # three more checkpoints: a repeated output would be committed by now
        finally:
            cancelled = cluster.flink("cancel", second, timeout_s=60)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr

    results = sorted(committed_outputs(outputs), key=lambda o: (o["id"], o["ts"]))
    keys = [(o["id"], o["ts"]) for o in results]
    assert len(keys) == len(set(keys)), "an output was repeated after the restore"
    upgraded = [o for o in results if o.pop("agent_version", None) == 2]
    # A record whose run finished before the resume (journaled) replays its
    # result; every other one ran on the changed code. No call twice.
    assert len(results) - len(upgraded) == settled, "a record ran on the old code after the resume"
    assert len(server.requests) == len(reviews), "a model call was repeated"
    assert results == expected_review_outputs(reviews)  # none lost; each product's summary continued


# --- a stock session cluster: more than one job ------------------------------


def test_a_stock_session_cluster_runs_one_review_job_after_another(local_outputs, tmp_path) -> None:
    """A cluster of the distribution as shipped (``tools/cluster.sh start
    --stock``: flink-python only in ``opt/``, no ``pemja.`` parent-first),
    and the review job submitted twice with ``flink run -py``, no mode
    given. In thread mode the second job on its TaskManager would fail
    (``NoSuchFieldException: loadedLibraryNames``); the job reads the
    cluster's set-up over REST and runs in process mode, so both finish
    with the local runner's outputs. The two submissions run at once (one
    TaskManager, 2 slots, parallelism 1 each): both load their Python
    support on the same TaskManager, and it halves the wall time.
    ``--execution-mode thread`` on it is refused before submission, naming
    the fix."""
    # `flink run -py` starts `python` from PATH when the cluster names none.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    stock = StandaloneCluster.start(tmp_path / "stock", taskmanagers=1, slots=2, env={"PATH": path}, stock=True)
    print(f"\n[stock cluster] up at {stock.rest_url} in {stock.start_s:.1f} s")
    job = str(REPO_ROOT / "jobs" / "review_analysis.py")
    try:
        started = time.monotonic()
        runs = []
        for n in (1, 2):
            log = open(tmp_path / f"run{n}.log", "w+", encoding="utf-8")  # a file: a full pipe stalls a run
            runs.append((subprocess.Popen(
                stock.flink_command("run", "-py", job, "--output", str(tmp_path / f"out{n}.jsonl"),
                                    "--parallelism", "1", "--restart-attempts", "0"),
                env=stock.env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT), log))
        for run, log in runs:
            try:
                run.wait(timeout=SUBMIT_TIMEOUT_S)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.wait()
                log.close()
        print(f"[stock cluster] two flink run -py at once (60 reviews each): {time.monotonic() - started:.1f} s")
        for n, (run, _) in enumerate(runs, 1):
            text = (tmp_path / f"run{n}.log").read_text(encoding="utf-8", errors="replace")
            assert run.returncode == 0, f"submission {n} failed:\n{text[-3000:]}\n{stock.log_tail()}"
            assert "running in process mode: the cluster at" in text and "lacks 'pemja.'" in text
            assert _sorted_outputs(tmp_path / f"out{n}.jsonl") == local_outputs
        jobs = [j for j in stock.jobs() if j["name"] == "review-analysis"]
        assert [j["state"] for j in jobs] == ["FINISHED", "FINISHED"]

        refused = stock.flink("run", "-py", job, "--output", str(tmp_path / "thread.jsonl"),
                              "--execution-mode", "thread", timeout_s=SUBMIT_TIMEOUT_S)
        text = refused.stdout + refused.stderr
        assert refused.returncode != 0 and "error: --execution-mode thread on the session cluster" in text
        assert "flink-python on the class path (lib/)" in text and "--execution-mode process" in text
        assert len(stock.jobs()) == 2, "the refused job was submitted"
    finally:
        stopped = stock.stop()
        assert stopped.returncode == 0, stopped.stderr
