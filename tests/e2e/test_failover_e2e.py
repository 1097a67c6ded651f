"""Failover end to end on the local mini-cluster.

1. A Python worker killed mid-run (``os._exit`` inside a tool) fails the job;
   Flink restarts it from the last completed checkpoint and the re-run
   replays journaled model replies instead of asking again: exactly one
   output per input, and no model request made again except those the
   journal allows (in flight at the crash). The job exports its traces over
   OTLP/HTTP to a receiver on 127.0.0.1 (issue 30): one trace per record,
   whole, no span twice, usage counted once, across the crash.
2. A job cancelled with a retained checkpoint and restored into a new job
   that reads more input continues each key's short-term memory and does not
   read the old input again.
3. Records still in flight when that checkpoint was taken finish in the
   restored job without any new input (their keys' restored timers resume
   them).

All read reviews through a checkpointed ``FileSource`` that watches its
directory (unbounded). A bounded input that ends early does not do here: its
final watermark comes at once, the agent operator then waits for all work in
flight, and no checkpoint completes until the job is done. Nor does
``env.from_collection``: it is not checkpointed, and a restore emits the
whole collection again.
"""

from __future__ import annotations

import hashlib
import dataclasses
import json
import os
import sys
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Tuple

import cloudpickle
import pytest

from flink_agents.api.decorators import tool
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.stores.factory import POSTGRES_DSN_ENV
from flink_agents.jobs.review_analysis import MODEL_SETUP, ReviewAnalysisAgent, product_id_of
from tests.support.flink_jobs import Collected, jsonl_stream, mini_cluster_env
from tests.support.flink_jobs import checkpoint_after as _checkpoint_after
from tests.support.flink_jobs import completed_checkpoints as _completed_checkpoints
from tests.support.flink_jobs import free_port as _free_port
from tests.support.flink_jobs import write_jsonl as _write_jsonl
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan

# The crash tool below runs in Flink's Python worker processes, which cannot
# import this test module by name: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO_ROOT = Path(__file__).resolve().parents[2]
N_REVIEWS = 500
CRASH_INPUT = 249  # the 250th input (or the next one whose request is unique)
PARALLELISM = 2
RUNS_SUFFIX = ".runs"


# --- the agent under test ----------------------------------------------------------


class CrashingReviewAgent(ReviewAnalysisAgent):
    """The review-analysis agent (same actions), with one more tool offered
    to the model: ``crash_worker_once`` kills the Python worker."""

    def __init__(self, base_url: str) -> None:
        super().__init__(model="openai:scripted", base_url=base_url, max_retries=0)
        setup = self.resources[ResourceType.CHAT_MODEL].pop(MODEL_SETUP)
        arguments = {**setup.arguments, "tools": [*setup.arguments["tools"], "crash_worker_once"]}
        self.add_resource(
            MODEL_SETUP,
            ResourceType.CHAT_MODEL,
            ResourceDescriptor(target_module=setup.target_module, target_clazz=setup.target_clazz, arguments=arguments),
        )

    @tool
    @staticmethod
    def crash_worker_once(marker: str) -> str:
        """Kill this Python worker unless the marker file exists.

        Every run appends ``<pid>@<unix time>`` to ``<marker>.runs``; the first
        creates the marker (with the time) and exits the process at once,
        without any cleanup.

        Args:
            marker: The marker file's path.
        """
        with open(marker + RUNS_SUFFIX, "a", encoding="utf-8") as runs:
            runs.write(f"{os.getpid()}@{time.time():.6f}\n")
        if os.path.exists(marker):
            return "survived"
        with open(marker, "w", encoding="utf-8") as out:
            out.write(json.dumps({"crashed_at": time.time(), "pid": os.getpid()}))
        os._exit(1)


# --- the scripted model ------------------------------------------------------------


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16)


def _notifies(review: str) -> bool:
    """Every 10th review (by a stable hash of its text) reports damage."""
    return _digest(review) % 10 == 0


def _answer(review: str) -> Dict[str, Any]:
    digest = _digest(review)
    return {"score": 1 + digest % 5, "reasons": [f"reason {digest % 97}"]}


RequestKey = Tuple[str, str, int]  # (product id, review text, tool rounds done)


def _request_key(body: Dict[str, Any]) -> RequestKey:
    messages = body["messages"]
    user = json.loads(next(m["content"] for m in messages if m["role"] == "user"))
    rounds = sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))
    return user["id"], user["review"], rounds


def _tool_call(name: str, arguments: Dict[str, Any]) -> Dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


class ScriptedReviewModel:
    """The model's side (a ``reply_fn``), noting when each request came."""

    def __init__(self, crash_review: Tuple[str, str], marker: Path) -> None:
        self.crash_review = crash_review
        self.marker = str(marker)
        self.times: Dict[int, float] = {}
        self._lock = threading.Lock()

    def __call__(self, body: Dict[str, Any], index: int) -> Dict[str, Any]:
        with self._lock:
            self.times[index] = time.time()
        product, review, rounds = _request_key(body)
        if rounds == 0 and (product, review) == self.crash_review:
            return _tool_call("crash_worker_once", {"marker": self.marker})
        if rounds == 0 and _notifies(review):
            return _tool_call("notify_shipping_manager", {"id": product, "review": review})
        return {"role": "assistant", "content": json.dumps(_answer(review))}


def _expected_requests(reviews: List[Dict[str, Any]]) -> Counter:
    """The requests of a run without failures: one per record and round."""
    expected: Counter = Counter()
    for review in reviews:
        expected[(review["id"], review["review"], 0)] += 1
        if _notifies(review["review"]):
            expected[(review["id"], review["review"], 1)] += 1
    return expected


# --- Flink plumbing (shared: tests/support/flink_jobs.py) -----------------------------


def _flink_env(checkpoints: Path, checkpoint_ms: int, **options: str) -> Any:
    """A mini-cluster environment: fixed-delay restarts, checkpoints into
    ``checkpoints`` retained on cancellation."""
    return mini_cluster_env(PARALLELISM, checkpoints, checkpoint_ms, restart_attempts=3, **options)


def _review_stream(env: Any, directory: Path) -> Any:
    """JSON-decoded lines of the files in ``directory`` (watched for new
    files), from a checkpointed source; the uids let a restore map its state."""
    return jsonl_stream(env, directory, "reviews", "reviews-source", "decode-reviews")


def _agent_outputs(env: Any, reviews: Any, agent: Any, **config: Any) -> Any:
    from pyflink.common import Types

    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **config)
    return agents_env.from_datastream(reviews, product_id_of, key_type=Types.STRING()).apply(agent).to_datastream()


def _agent_counters(rest_port: int, timeout_s: float = 5.0) -> Dict[int, Dict[str, int]]:
    """The agent operator's counters (metric group ``flink_agents``) per
    subtask of the running job, through the mini-cluster's REST API; empty
    if they cannot be read within ``timeout_s``."""
    base = f"http://127.0.0.1:{rest_port}"

    def get(path: str) -> Any:
        with urllib.request.urlopen(base + path, timeout=5) as response:
            return json.load(response)

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            job = next(j["id"] for j in get("/jobs")["jobs"] if j["status"] == "RUNNING")
            vertex = next(v["id"] for v in get(f"/jobs/{job}")["vertices"] if v["name"].startswith("agent:"))
            names = [m["id"] for m in get(f"/jobs/{job}/vertices/{vertex}/metrics") if ".flink_agents." in m["id"]]
            counters: Dict[int, Dict[str, int]] = defaultdict(dict)
            for metric in get(f"/jobs/{job}/vertices/{vertex}/metrics?get=" + ",".join(names)) if names else []:
                subtask, _, rest = metric["id"].partition(".")
                counters[int(subtask)][rest.rsplit(".", 1)[1]] = int(float(metric["value"]))
            if len(counters) == PARALLELISM and all("journal_writes" in c for c in counters.values()):
                return dict(counters)
        except (OSError, ValueError, StopIteration):
            pass
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.2)


# A review written after every other output arrived, one per product: the
# end-of-input marker that replaces "wait a moment, nothing more came".
SENTINEL_REVIEW = "The last review of its product in this test: an end-of-input marker."


def _take_end_of_input(job: Collected, input_dir: Path, seen: Counter, first_ts: int) -> List[Dict[str, Any]]:
    """Append one sentinel review per product of ``seen`` (records of the
    product so far) and take the next outputs: exactly the sentinels'.

    Written once every earlier output arrived, each sentinel is its key's
    last record, and a key's outputs leave the operator in record order over
    one channel: an output of an earlier record still to come (a late
    duplicate) would arrive before its key's sentinel, among the outputs
    taken here. Each sentinel's ``reviews_seen`` counts the key's records
    applied to state: exactly once each, plus the sentinel.
    """
    sentinels = [{"id": p, "review": SENTINEL_REVIEW, "ts": first_ts + n} for n, p in enumerate(sorted(seen))]
    _write_jsonl(input_dir / "zz-end-of-input.jsonl", sentinels)
    outputs = job.take(len(sentinels))
    assert sorted((o["id"], o["ts"]) for o in outputs) == sorted((s["id"], s["ts"]) for s in sentinels), (
        "an output arrived after the last record's (a duplicate?)"
    )
    assert {o["id"]: o["reviews_seen"] for o in outputs} == {p: n + 1 for p, n in seen.items()}
    return outputs


# --- 1. a worker crash mid-run ---------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def journal_config(request: pytest.FixtureRequest, tmp_path: Path) -> Dict[str, str]:
    if request.param == "sqlite":
        return {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}
    dsn = os.environ.get(POSTGRES_DSN_ENV)
    if not dsn:
        pytest.skip(f"{POSTGRES_DSN_ENV} is not set: start PostgreSQL with `bash tools/postgres.sh` "
                    "and export the DSN it prints")
    return {"journal.store": "postgres", "journal.postgres.dsn": dsn}


@pytest.mark.timeout(300)
def test_worker_crash_recovers_without_repeating_journaled_calls(
    journal_config: Dict[str, str], scripted_chat_server: Any, shared_reviews_path: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = shared_reviews_path.read_text(encoding="utf-8").splitlines()[:N_REVIEWS]
    reviews = [json.loads(line) for line in lines]
    assert len(reviews) == N_REVIEWS
    # Identical requests are told apart by count only: the crash goes to a
    # review whose request is unique.
    contents = Counter((r["id"], r["review"]) for r in reviews)
    crash_index = next(
        i for i in range(CRASH_INPUT, N_REVIEWS)
        if contents[(reviews[i]["id"], reviews[i]["review"])] == 1 and not _notifies(reviews[i]["review"])
    )
    crashed = (reviews[crash_index]["id"], reviews[crash_index]["review"])
    marker = tmp_path / "crash_worker_once.marker"
    model = ScriptedReviewModel(crashed, marker)
    scripted_chat_server.set_reply_fn(model)

    input_dir = tmp_path / "input"
    input_dir.mkdir()
    _write_jsonl(input_dir / "reviews.jsonl", reviews)
    # A real crash needs the Python workers in processes of their own: a
    # local job runs them inside this process by default (loopback mode),
    # where os._exit would end the test run.
    monkeypatch.setenv("_python_worker_execution_mode", "process")
    rest_port = _free_port()
    checkpoints = tmp_path / "checkpoints"
    env = _flink_env(checkpoints, 500, **{
        "rest.bind-port": str(rest_port),
        "metrics.fetcher.update-interval": "100 ms",
        # Cancelling a Python task in a failover now and then fails in Beam
        # (DefaultJobBundleFactory.close: "Reference count must not be
        # negative"), which is fatal to its TaskManager: spare TaskManagers
        # stand in, as a cluster would start a new one.
        "minicluster.number-of-taskmanagers": "3",
        "taskmanager.numberOfTaskSlots": str(PARALLELISM),
    })
    agent = CrashingReviewAgent(scripted_chat_server.base_url)
    receiver = OtlpReceiver().__enter__()
    tracing = {"tracing.exporter": "otlp", "tracing.otlp.endpoint": receiver.endpoint,
               "tracing.export_interval_ms": "200", "tracing.otlp.timeout_s": "10"}
    job = Collected(_agent_outputs(env, _review_stream(env, input_dir), agent, **journal_config, **tracing),
                    "failover")
    started = time.monotonic()
    products = Counter(r["id"] for r in reviews)
    try:
        outputs = job.take(N_REVIEWS)
        elapsed = time.monotonic() - started
        # Nothing more comes: the next outputs are the end-of-input markers'.
        _take_end_of_input(job, input_dir, products, first_ts=max(r["ts"] for r in reviews) + 1)
        counters = _agent_counters(rest_port)
        # Every record's trace, before the job (and its span queues) goes.
        _wait_for_roots(receiver, N_REVIEWS + len(products), timeout_s=30)
    finally:
        job.close()
        receiver.__exit__(None, None, None)
    _check_traces(receiver.spans, products)

    # (a) The worker crashed once and the job recovered. Requests pause while
    # the job restarts (old workers cancelled, restart delay, new workers):
    # the longest pause after the crash separates the two attempts.
    assert marker.is_file(), "crash_worker_once never ran"
    crashed_at = json.loads(marker.read_text())["crashed_at"]
    requests = sorted((model.times[i], _request_key(body)) for i, body in enumerate(scripted_chat_server.requests))
    # The markers' requests: one each, after the test's records.
    markers = [key for _, key in requests if key[1] == SENTINEL_REVIEW]
    assert sorted(markers) == sorted((p, SENTINEL_REVIEW, 0) for p in products)
    requests = [(t, key) for t, key in requests if key[1] != SENTINEL_REVIEW]
    after_crash = [crashed_at] + [t for t, _ in requests if t >= crashed_at]
    paused_at, restarted_at = max(zip(after_crash, after_crash[1:]), key=lambda pair: pair[1] - pair[0])
    assert restarted_at - paused_at >= 0.5, "requests did not pause after the crash: did the job restart?"
    # The tool ran twice: crashing, then again in the restarted job (it was
    # in flight at the crash: started, result not journaled).
    tool_runs = [float(line.split("@")[1]) for line in Path(str(marker) + RUNS_SUFFIX).read_text().split()]
    assert len(tool_runs) == 2, f"crash_worker_once ran at {tool_runs}"
    assert tool_runs[0] <= crashed_at <= paused_at < tool_runs[1]

    # (b) Exactly one output per input (execute_and_collect hands out results
    # exactly once under checkpointing), right for its record and key.
    by_record = {(o["id"], o["ts"]): o for o in outputs}
    assert len(by_record) == N_REVIEWS, "an output is duplicated"
    assert set(by_record) == {(r["id"], r["ts"]) for r in reviews}
    seen: Counter = Counter()
    for review in reviews:
        seen[review["id"]] += 1
        output = by_record[(review["id"], review["ts"])]
        assert output["reviews_seen"] == seen[review["id"]], "short-term memory was not restored exactly"
        assert output["score"] == _answer(review["review"])["score"]

    # (c) Model requests, against a run without failures: one per record and
    # round.
    actual = Counter(key for _, key in requests)
    expected = _expected_requests(reviews)
    # The crashed record: the reply asking for crash_worker_once was committed
    # before the tool started, so the re-run replays it (no second round-0
    # request), runs the tool again and asks for round 1: once, after the
    # restart.
    assert actual[crashed + (0,)] == 1, "the journaled reply that asked for the crash was requested again"
    assert expected[crashed + (1,)] == 0
    expected[crashed + (1,)] = 1
    assert [t >= max(restarted_at, tool_runs[1]) for t, key in requests if key == crashed + (1,)] == [True]
    second_round = next(b for b in scripted_chat_server.requests if _request_key(b) == crashed + (1,))
    assert [m["content"] for m in second_round["messages"] if m["role"] == "tool"] == ["survived"]
    missing = expected - actual
    assert not missing, f"requests never made: {missing}"
    # Any other request made again was in flight at the failover (sent, reply
    # not committed): made again once, at most one per product (a key runs
    # one record at a time, a run one model call at a time), and it is the
    # product's last request before the restart and its first after.
    repeated = actual - expected
    assert set(repeated.values()) <= {1}, f"a request was made more than twice: {repeated}"
    assert len({key[0] for key in repeated}) == len(repeated), f"two repeated requests of one product: {repeated}"
    for key in repeated:
        of_product = [(t, k) for t, k in requests if k[0] == key[0]]
        last_before = [k for t, k in of_product if t < restarted_at][-1]
        first_after = [k for t, k in of_product if t >= restarted_at][0]
        assert last_before == first_after == key, f"{key} was made again but was not in flight at the failover"
    # Outputs reach this process only once a checkpoint covers them: the
    # records of outputs that arrived before the crash were all before a
    # completed checkpoint, and none of their requests was made again.
    text_of = {(r["id"], r["ts"]): r["review"] for r in reviews}
    checkpointed = {(o["id"], text_of[(o["id"], o["ts"])]) for t, o in job.arrivals if t < crashed_at}
    assert checkpointed, "the crash came before the first completed checkpoint; the restore restored nothing"
    assert not [key for key in repeated if key[:2] in checkpointed]

    # (d) Journal writes per record, from the operator's Flink metrics, of the
    # restarted attempt (counters start from zero in new workers): a fresh
    # run writes 2 (4 with a round of tool calls), a replayed run less.
    print(
        f"\n[{journal_config['journal.store']}] {N_REVIEWS} reviews in {elapsed:.1f} s; crash at input "
        f"#{crash_index + 1}; first request after the restart {restarted_at - crashed_at:.1f} s later; "
        f"{len(checkpointed)} records checkpointed before the crash; {len(requests)} model requests for "
        f"{sum(expected.values())} expected; made again (in flight at the crash): {len(repeated)}"
    )
    if not counters:
        print("  (the operator's metrics could not be read)")
    for subtask, values in sorted(counters.items()):
        per_record = values.get("journal_writes", 0) / max(values.get("records", 0), 1)
        print(f"  restarted subtask {subtask}: {per_record:.2f} journal writes per record; {values}")


def _wait_for_roots(receiver: OtlpReceiver, records: int, timeout_s: float) -> None:
    """Until the receiver has a root span per record (spans go out every
    200 ms; lost ones with the restarted job's recovery, a few s later)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len({s.span_id for s in receiver.spans if s.parent_id is None}) >= records:
            return
        time.sleep(0.2)


def _same_span(a: ReceivedSpan, b: ReceivedSpan) -> bool:
    """The same span, but for ``flink_agents.replayed`` (set when a replay
    sends what its first attempt's marks do not cover)."""
    def content(span: ReceivedSpan) -> ReceivedSpan:
        return dataclasses.replace(
            span, attributes={k: v for k, v in span.attributes.items() if k != "flink_agents.replayed"})

    return content(a) == content(b)


def _check_traces(spans: List[ReceivedSpan], products: Counter) -> None:
    """One trace per record (its key and sequence number): one root, every
    span's parent in its trace, no two different spans with one id, the
    run's usage its model calls' usage.

    A span may arrive twice only as the same span: OTLP has no idempotent
    write, so a worker killed between an export's success and its journal
    mark sends it again after the restore, with the same id and content
    (docs/observability.md, "Emitted after commit, once"); a backend keyed
    by span id shows it once, and so does this check."""
    by_id: Dict[str, ReceivedSpan] = {}
    resent = []
    for span in spans:
        first = by_id.setdefault(span.span_id, span)
        if first is not span:
            assert _same_span(first, span), f"two different spans with id {span.span_id}: {first} and {span}"
            resent.append(span.span_id)
    # At most one export batch: the one whose marks the killed worker did
    # not write (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512 by default).
    assert len(resent) <= 512, f"{len(resent)} spans sent twice: more than one export batch"
    if resent:
        print(f"  {len(resent)} span(s) sent again, identical (killed between export and mark): {resent}")
    spans = list(by_id.values())
    by_trace: Dict[str, List[ReceivedSpan]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    roots = [s for s in spans if s.parent_id is None]
    runs = Counter((r.attributes["flink_agents.key"], r.attributes["flink_agents.seq"]) for r in roots)
    assert max(runs.values()) == 1 and len(roots) == len(by_trace)
    # Each key's records, seq 0.. in order, each with its trace (the markers' too).
    assert {key: sorted(seq for k, seq in runs if k == key) for key in products} == {
        key: list(range(n + 1)) for key, n in products.items()}
    crash_tools = 0
    for root in roots:
        trace = {s.span_id: s for s in by_trace[root.trace_id]}
        assert root.name == "invoke_agent CrashingReviewAgent" and root.attributes["flink_agents.outcome"] == "ok"
        chats = [s for s in trace.values() if s.name.startswith("chat ")]
        assert chats, f"record {root.attributes['flink_agents.key']}#{root.attributes['flink_agents.seq']}: no model call"
        for span in trace.values():
            if span is not root:
                assert span.parent_id in trace, f"{span.name}: its parent is not in its trace"
        for chat in chats:
            assert trace[chat.parent_id].parent_id == root.span_id  # model call <- its step <- the run
            assert chat.attributes["gen_ai.provider.name"] == "openai"
        for field in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
            assert root.attributes[field] == sum(c.attributes[field] for c in chats)
        crash_tools += sum(1 for s in trace.values() if s.name == "execute_tool crash_worker_once")
    # The crashing tool call ran twice; the first never completed, so one span.
    assert crash_tools == 1
    print(f"  traces: {len(roots)} records, {len(spans)} spans, "
          f"{sum(1 for s in spans if s.attributes.get('flink_agents.replayed'))} exported after the crash")


# --- 2. restore a retained checkpoint into a new job --------------------------------------


def _reviews_of(products: List[str], per_product: int, first_ts: int) -> List[Dict[str, Any]]:
    """Reviews of ``products`` taking turns, texts from the bundled sample."""
    texts = [json.loads(line)["review"] for line in (REPO_ROOT / "jobs/data/sample_reviews.jsonl").read_text().splitlines()]
    reviews = []
    for n in range(per_product * len(products)):
        ts = first_ts + n
        reviews.append({"id": products[n % len(products)], "review": texts[ts % len(texts)], "ts": ts})
    return reviews


@pytest.mark.timeout(300)
def test_restore_from_retained_checkpoint_continues_each_key(tmp_path: Path) -> None:
    products = ["B0RESTORE1", "B0RESTORE2", "B0RESTORE3"]
    first = _reviews_of(products, 20, first_ts=1_760_000_000)
    second = _reviews_of(products, 15, first_ts=1_760_000_000 + len(first))
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    checkpoints = tmp_path / "checkpoints"
    journal = {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}

    # Job 1 reads file 1, is checkpointed after its last output and cancelled.
    _write_jsonl(input_dir / "part-1.jsonl", first)
    env = _flink_env(checkpoints, 300)
    job = Collected(_agent_outputs(env, _review_stream(env, input_dir), ReviewAnalysisAgent(), **journal), "job-1")
    try:
        outputs_1 = job.take(len(first))
        last_output_at = job.arrivals[-1][0]
        _checkpoint_after(checkpoints, last_output_at)
        assert job.unread() == []
    finally:
        job.close()
    retained = _completed_checkpoints(checkpoints)
    assert retained, "no checkpoint was retained on cancellation"
    number, restore_from, completed_at = retained[-1]
    assert completed_at > last_output_at
    assert sorted((o["id"], o["ts"]) for o in outputs_1) == sorted((r["id"], r["ts"]) for r in first)
    counts_1 = Counter(r["id"] for r in first)
    score_sums: Counter = Counter()
    for output in sorted(outputs_1, key=lambda o: o["ts"]):
        score_sums[output["id"]] += output["score"]
        assert output["reviews_seen"] == (output["ts"] - first[0]["ts"]) // len(products) + 1

    # Job 2 restores chk-N and reads the same directory, where file 2 is new.
    # The collect sink of job 1 has no uid (execute_and_collect adds it), so
    # its state is left behind; source, decode map and agent have uids.
    _write_jsonl(input_dir / "part-2.jsonl", second)
    env = _flink_env(checkpoints, 300, **{
        "execution.state-recovery.path": restore_from.as_uri(),
        "execution.state-recovery.ignore-unclaimed-state": "true",
    })
    job = Collected(_agent_outputs(env, _review_stream(env, input_dir), ReviewAnalysisAgent(), **journal), "job-2")
    try:
        outputs_2 = job.take(len(second))
        # File 1 was not read again: the next outputs are the markers', and
        # each product counts 20 + 15 records before its marker.
        _take_end_of_input(job, input_dir, Counter(r["id"] for r in first + second), first_ts=second[-1]["ts"] + 1)
    finally:
        job.close()

    # Only file 2 was processed, and each product's summary went on from
    # where job 1 stopped.
    assert sorted((o["id"], o["ts"]) for o in outputs_2) == sorted((r["id"], r["ts"]) for r in second)
    by_record = {(o["id"], o["ts"]): o for o in outputs_2}
    seen = Counter(counts_1)
    for review in second:
        output = by_record[(review["id"], review["ts"])]
        seen[review["id"]] += 1
        score_sums[review["id"]] += output["score"]
        assert output["reviews_seen"] == seen[review["id"]]
        assert output["mean_score"] == pytest.approx(round(score_sums[review["id"]] / seen[review["id"]], 3))
    assert all(seen[p] == counts_1[p] + 15 for p in products)
    print(f"\nrestored chk-{number} of job 1 into job 2: reviews_seen went on from {dict(counts_1)}")


# --- 3. records in flight at a checkpoint finish in the restored job -------------------------


class HeldReplies:
    """A ``reply_fn`` answering ``{"score", "reasons"}`` at once, except to
    the held reviews while ``holding``: those requests wait (their records
    stay in flight) until ``release``."""

    def __init__(self, held: List[Tuple[str, str]]) -> None:
        self.held = set(held)
        self.holding = True
        self._released = threading.Event()

    def __call__(self, body: Dict[str, Any], index: int) -> Dict[str, Any]:
        product, review, _ = _request_key(body)
        if self.holding and (product, review) in self.held:
            self._released.wait(timeout=120)
        return {"role": "assistant", "content": json.dumps(_answer(review))}

    def release(self) -> None:
        self._released.set()


@pytest.mark.timeout(300)
def test_records_in_flight_at_a_checkpoint_finish_after_the_restore(
    scripted_chat_server: Any, tmp_path: Path,
) -> None:
    products = ["B0INFLIGHT1", "B0INFLIGHT2", "B0INFLIGHT3"]
    reviews = _reviews_of(products, 10, first_ts=1_770_000_000)
    # The 4th review of product 1 and the 6th of product 2 get no answer in
    # job 1: they and the reviews after them are pending in every checkpoint.
    held = [r for r in reviews if r["id"] == products[0]][3], [r for r in reviews if r["id"] == products[1]][5]
    model = HeldReplies([(r["id"], r["review"]) for r in held])
    scripted_chat_server.set_reply_fn(model)
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    _write_jsonl(input_dir / "reviews.jsonl", reviews)
    checkpoints = tmp_path / "checkpoints"
    journal = {"journal.store": "sqlite", "journal.sqlite.path": str(tmp_path / "journal.db")}

    def job(name: str, **options: str) -> Collected:
        env = _flink_env(checkpoints, 300, **options)
        agent = ReviewAnalysisAgent(model="openai:scripted", base_url=scripted_chat_server.base_url, max_retries=0)
        return Collected(_agent_outputs(env, _review_stream(env, input_dir), agent, **journal), name)

    try:
        first = job("in-flight-1")
        try:
            outputs_1 = first.take(3 + 5 + 10)
            _checkpoint_after(checkpoints, first.arrivals[-1][0])
            assert first.unread() == []
        finally:
            first.close()
        restore_from = _completed_checkpoints(checkpoints)[-1][1]

        # Job 2 gets no new input: only the restored state (and its timers)
        # can bring the pending records back.
        model.holding = False
        second = job("in-flight-2", **{
            "execution.state-recovery.path": restore_from.as_uri(),
            "execution.state-recovery.ignore-unclaimed-state": "true",
        })
        try:
            outputs_2 = second.take(len(reviews) - len(outputs_1), timeout_s=60)
            # Nothing more: the next outputs are the markers', each product's
            # 10 records applied once before it.
            _take_end_of_input(second, input_dir, Counter(r["id"] for r in reviews), first_ts=reviews[-1]["ts"] + 1)
        finally:
            second.close()
    finally:
        model.release()

    first_ids = {(o["id"], o["ts"]) for o in outputs_1}
    second_ids = {(o["id"], o["ts"]) for o in outputs_2}
    assert not first_ids & second_ids
    assert first_ids | second_ids == {(r["id"], r["ts"]) for r in reviews}
    assert {(r["id"], r["ts"]) for r in held} <= second_ids
    by_record = {(o["id"], o["ts"]): o for o in outputs_1 + outputs_2}
    seen: Counter = Counter()
    for review in reviews:
        seen[review["id"]] += 1
        assert by_record[(review["id"], review["ts"])]["reviews_seen"] == seen[review["id"]]
