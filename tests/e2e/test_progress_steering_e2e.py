"""The progress stream and steering end to end, on the local mini-cluster
(and steering on the local runner).

1. Progress on Flink (parallelism 2): per run, the records of each commit in
   the documented order, the ``output`` record equal to the main output, a
   key's records in commit order, one publish per commit (4 per run; the
   local runner's counters on the same agent and model agree). The stream is
   opt-in: ``progress_stream()`` without ``to_datastream(progress=True)``
   raises.
2. Steering on Flink: each steering message reaches exactly one model
   request, of its key, as a user message, in send order, after the tool
   results of the round, never in another key's requests; the progress stream
   has ``steering_consumed`` records with them. The two inputs race (their
   timing is not controllable), so the scripted model keeps a key's turn
   going (one more tool round) until it has seen all of the key's messages:
   then every message must be consumed, whenever it arrived.
3. The steering queue bound on Flink: a key with no turn running queues 32
   messages, each one more goes to ``error_stream()`` naming the key, the
   message and "full"; the next record's first model request carries the 32
   in order (for a key never seen, and for one whose turn ended before the
   messages came); once taken they leave the key's state, so 32 fit again.
   Deterministic: one key's messages travel one path in order, so the error
   record of the 33rd proves the 32 before it were queued.
4. The local runner: ``with_steering([...])`` messages reach the key's first
   model request in order; 33 for one key: 32 delivered, 1 error record.

The model is the scripted OpenAI-compatible server (the real OpenAI SDK in
the Python workers), which records every request in the test process.

5. ``with_steering`` keeps each key's input order when a source's
   parallelism differs from the job's (``from_collection`` has 1): the
   tagging map runs at its source's parallelism, so no rebalance reorders a
   key's records (a regression test of that defect).

Both inputs of the timing-sensitive steering jobs are ``FileSource``s of the
job's parallelism (one file: one split, read in order). Those jobs end with
end-of-run markers, not a pause: once the items the test waits for arrived,
one marker record per key and then one steering message more than the queue
holds per key; a key's marker output, ``run_finished`` and error record prove
that every item of the key emitted before them arrived (a late duplicate
would come before them), and the assertions exclude the markers.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import cloudpickle
import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.runtime.features.steering import MAX_STEERING_QUEUE
from tests.support.flink_jobs import Collected, jsonl_stream, mini_cluster_env, write_jsonl

# The agent, its tool and the key selectors run in Flink's Python workers,
# which cannot import this module by name: ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARALLELISM = 2
JOB_TIMEOUT_S = 90.0
HOLD_S = 20.0  # the longest the scripted model keeps a turn going for steering


# --- the agent (runs in the Python workers) ---------------------------------------------


def double(n: int) -> int:
    """Double a number.

    Args:
        n: The number.
    """
    return 2 * n


class TaskAgent(Agent):
    """Asks the model about a record's task (it may call ``double``), then
    emits ``{"key", "task", "answer"}``."""

    def __init__(self, base_url: str) -> None:
        super().__init__()
        self.add_resource("openai", ResourceType.CHAT_MODEL_CONNECTION, ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION,
            base_url=base_url, max_retries=0, timeout_s=60.0,
        ))
        self.add_resource("model", ResourceType.CHAT_MODEL, ResourceDescriptor(
            clazz=ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
            connection="openai", model="gpt-test", tools=["double"],
        ))
        self.add_resource("double", ResourceType.TOOL, double)
        self.add_action("ask", [InputEvent], TaskAgent.ask)
        self.add_action("answer", [ChatResponseEvent], TaskAgent.answer)

    @staticmethod
    def ask(event: InputEvent, ctx: Any) -> None:
        task = event.input["task"]
        ctx.sensory_memory.set("task", task)
        message = ChatMessage(role=MessageRole.USER, content=json.dumps({"task": task}))
        ctx.send_event(ChatRequestEvent(model="model", messages=[message]))

    @staticmethod
    def answer(event: ChatResponseEvent, ctx: Any) -> None:
        output = {"key": ctx.key, "task": ctx.sensory_memory.get("task"), "answer": event.response.content}
        ctx.send_event(OutputEvent(output=output))


def _record_key(record: Dict[str, Any]) -> str:
    return record["key"]


def _steering_key(message: Dict[str, Any]) -> str:
    return message["key"]


# --- the scripted model (runs in the test process) --------------------------------------


def _task_of(body: Dict[str, Any]) -> str:
    """The task of a model request: its first user message."""
    first = next(m for m in body["messages"] if m["role"] == "user")
    return json.loads(first["content"])["task"]


def _steering_in(messages: List[Dict[str, Any]]) -> List[Tuple[int, Dict[str, Any]]]:
    """``(position, steering message)`` of the steering messages in a
    request: user messages whose JSON content has a ``text``."""
    found = []
    for position, message in enumerate(messages):
        if message["role"] != "user":
            continue
        try:
            content = json.loads(message["content"])
        except (TypeError, ValueError):
            continue
        if isinstance(content, dict) and "text" in content:
            found.append((position, content))
    return found


def _tool_rounds(messages: List[Dict[str, Any]]) -> int:
    return sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls"))


def _call(name: str, **arguments: Any) -> Dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


class ScriptedModel:
    """The scripted server's ``reply_fn``.

    With ``tool_round``, a turn's first request asks for ``double`` three
    times at once. While a key's ``expected`` steering texts have not all
    been seen in its requests, a turn asks for one more ``double`` (until
    ``HOLD_S`` after the key's first request) instead of answering. The
    answer names the task and the tool results it got.
    """

    def __init__(self, tool_round: bool, expected: Optional[Dict[str, List[str]]] = None) -> None:
        self.tool_round = tool_round
        self.expected = {key: set(texts) for key, texts in (expected or {}).items()}
        self.seen: Dict[str, set] = defaultdict(set)
        self.first_request: Dict[str, float] = {}
        self._lock = threading.Lock()

    def __call__(self, body: Dict[str, Any], index: int) -> Dict[str, Any]:
        messages = body["messages"]
        task = _task_of(body)
        key = task.partition("#")[0]
        with self._lock:
            self.seen[key].update(m["text"] for _, m in _steering_in(messages))
            waiting = self.expected.get(key, set()) - self.seen[key]
            hold_until = self.first_request.setdefault(key, time.monotonic()) + HOLD_S
        rounds = _tool_rounds(messages)
        if self.tool_round and rounds == 0:
            return {"role": "assistant", "content": None, "tool_calls": [_call("double", n=i) for i in range(3)]}
        if waiting and time.monotonic() < hold_until:
            time.sleep(0.25)  # few rounds: each one floods the job with progress records
            return {"role": "assistant", "content": None, "tool_calls": [_call("double", n=10 + rounds)]}
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return {"role": "assistant", "content": f"{task}: {results}"}


# --- helpers (the test process) ---------------------------------------------------------


def _agents_env(env: Any, tmp_path: Path, **config: Any) -> Any:
    return AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db"), **config}
    )


def _union(*streams: Any) -> Any:
    """One stream of the items of ``streams`` (no Python operator in
    between: with bundles of one element each would cost a round trip to a
    Python worker per item; ``_classify`` tells them apart)."""
    return streams[0].union(*streams[1:])


def _classify(item: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """``("error" | "progress" | "output", item)``."""
    if "error_type" in item:
        return "error", item
    if "commit" in item and "kind" in item:
        return "progress", item
    return "output", item


def _take_until(job: Collected, items: List[Tuple[str, Any]], done: Callable[[List[Tuple[str, Any]]], bool],
                what: str, timeout_s: float = JOB_TIMEOUT_S) -> None:
    """Append the job's items to ``items`` until ``done(items)``."""
    deadline = time.monotonic() + timeout_s
    while not done(items):
        left = max(deadline - time.monotonic(), 0.001)
        try:
            batch = job.take(1, timeout_s=left)
        except AssertionError as exc:  # nothing in time, or the job ended
            raise AssertionError(f"{what}: {exc}; the last items: {items[-10:]}") from exc
        items.extend(_classify(item) for item in batch)


def _of(items: List[Tuple[str, Any]], tag: str) -> List[Any]:
    return [item for name, item in items if name == tag]


def _finished_runs(items: List[Tuple[str, Any]]) -> set:
    return {(r["key"], r["seq"]) for r in _of(items, "progress") if r["kind"] == "run_finished"}


# --- the end-of-run markers (the test process) -----------------------------------------
#
# Written once every item the test waits for arrived, a key's marker record is
# its last record and its marker steering messages its last messages. A key's
# items leave its operator subtask in the order they were emitted, one channel
# per stream (outputs, progress, errors): an item of the key still to come (a
# late duplicate) would arrive before the key's marker items, so once those
# arrived, "nothing more" is proved, not waited for.

MARKER = "#end"  # the task of a key's marker record: "<key>#end"
MARKER_TEXT = "end-of-run marker"  # the text of a marker steering message starts so


def _marker_task(key: str) -> str:
    return key + MARKER


def _is_marker_task(task: str) -> bool:
    return task.endswith(MARKER)


def _marker_messages(key: str) -> List[Dict[str, Any]]:
    """One more than a key's steering queue holds: on an empty queue with no
    turn running, exactly the last one is reported, as the key's marker error."""
    return [{"key": key, "text": f"{MARKER_TEXT} {key} #{j}"} for j in range(MAX_STEERING_QUEUE + 1)]


def _is_marker_error(error: Dict[str, Any]) -> bool:
    return str(error["record"].get("text", "")).startswith(MARKER_TEXT)


def _marker_runs(items: List[Tuple[str, Any]]) -> set:
    """``(key, seq)`` of the marker records' runs (their ``output`` record names the task)."""
    return {(r["key"], r["seq"]) for r in _of(items, "progress")
            if r["kind"] == "output" and _is_marker_task(r["output"]["task"])}


def _take_end_of_run(job: Collected, items: List[Tuple[str, Any]], main_dir: Path, steering_dir: Path,
                     keys: List[str]) -> None:
    """Write one marker record per key, take items until each marker's output
    and its ``run_finished`` record arrived; then write each key's marker
    steering messages (the marker runs ended: its queue is empty and no turn
    runs) and take items until each key's marker error arrived.

    Only keys with no steering message waiting may get a marker (the marker
    turn would take it): the caller's assertions check that the marker turns
    took none (``_without_markers``).
    """
    write_jsonl(main_dir / "zz-end-of-run.jsonl", [{"key": key, "task": _marker_task(key)} for key in keys])

    def runs_done(got: List[Tuple[str, Any]]) -> bool:
        outputs = {o["task"] for o in _of(got, "output")}
        runs = _marker_runs(got)
        return ({_marker_task(key) for key in keys} <= outputs and {key for key, _ in runs} >= set(keys)
                and runs <= _finished_runs(got))

    _take_until(job, items, runs_done, "the marker records' outputs and run_finished records")
    last = {key: _marker_messages(key)[-1] for key in keys}
    write_jsonl(steering_dir / "zz-end-of-run.jsonl", [m for key in keys for m in _marker_messages(key)])
    _take_until(job, items, lambda got: all(any(e["record"] == m for e in _of(got, "error")) for m in last.values()),
                "the marker steering messages' error records")


def _without_markers(items: List[Tuple[str, Any]], requests: List[Dict[str, Any]], keys: List[str]
                     ) -> Tuple[List[Tuple[str, Any]], List[Dict[str, Any]]]:
    """The items and model requests that are not the markers', after checking
    the markers' own: one output per key, one run per key that took no
    steering message (its one plain model request, or its tool round, carries
    none), one error per key (its last marker message's)."""
    runs = _marker_runs(items)
    markers = [(name, item) for name, item in items
               if (name == "output" and _is_marker_task(item["task"]))
               or (name == "progress" and (item["key"], item["seq"]) in runs)
               or (name == "error" and _is_marker_error(item))]
    assert sorted(o["task"] for o in _of(markers, "output")) == sorted(_marker_task(key) for key in keys)
    assert sorted(key for key, _ in runs) == sorted(keys), runs
    assert [r for r in _of(markers, "progress") if r["kind"] == "steering_consumed" and r["messages"]] == [], \
        "a marker turn took a steering message meant for a real turn"
    assert sorted((e["key"], e["record"]["text"]) for e in _of(markers, "error")) == sorted(
        (key, _marker_messages(key)[-1]["text"]) for key in keys
    ), "a marker steering message was reported other than the last of its key's"
    marker_requests = [body for body in requests if _is_marker_task(_task_of(body))]
    assert sorted({_task_of(body) for body in marker_requests}) == sorted(_marker_task(key) for key in keys)
    assert all(_steering_in(body["messages"]) == [] for body in marker_requests), "a marker turn got steering"
    marker_ids = {id(item) for _, item in markers}
    rest = [(name, item) for name, item in items if id(item) not in marker_ids]
    return rest, [body for body in requests if not _is_marker_task(_task_of(body))]


def _assert_no_duplicates(items: List[Tuple[str, Any]]) -> None:
    """No item arrived twice, and each run has one ``run_started`` and one ``run_finished``."""
    texts = [json.dumps(item, sort_keys=True, default=str) for _, item in items]
    assert len(texts) == len(set(texts)), [t for t in set(texts) if texts.count(t) > 1]
    for run, records in _by_run(_of(items, "progress")).items():
        kinds = [r["kind"] for r in records]
        assert (kinds.count("run_started"), kinds.count("run_finished")) == (1, 1), (run, kinds)


def _by_run(progress: List[Dict[str, Any]]) -> Dict[Tuple[str, int], List[Dict[str, Any]]]:
    runs: Dict[Tuple[str, int], List[Dict[str, Any]]] = defaultdict(list)
    for record in progress:
        runs[(record["key"], record["seq"])].append(record)
    return runs


def _kinds_by_commit(records: List[Dict[str, Any]]) -> Dict[int, List[str]]:
    commits: Dict[int, List[str]] = {}
    for record in records:
        commits.setdefault(record["commit"], []).append(record["kind"])
    return commits


def _consumed(record: Dict[str, Any]) -> List[Any]:
    """The messages of a ``steering_consumed`` record, in the order taken."""
    return list(record["messages"])


def _requests_by_task(requests: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """A task's model requests, in the order they came (one turn at a time
    per key, so this is the turn's order)."""
    tasks: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for body in requests:
        tasks[_task_of(body)].append(body)
    return tasks


THREE_TOOLS_COMMITS = {
    1: ["run_started", "step_completed"],
    2: ["model_reply", "step_completed"],
    3: ["tool_result", "tool_result", "tool_result", "step_completed"],
    4: ["model_reply", "step_completed", "step_completed", "output", "run_finished"],
}


def _tool_results_merged(by_commit: Dict[int, List[str]]) -> Dict[int, List[str]]:
    """``by_commit`` with the tool round's commits merged into commit 3.

    Each tool result that lands while a sibling still runs is committed (and
    published) as it lands, unless its siblings land within the journal's
    group-commit delay, so the three results and the tool step's completion
    take, by timing, one to three commits: 4 to 6 in all (docs/durability.md).
    """
    numbers = sorted(by_commit)
    middle = numbers[2:-1]
    assert 1 <= len(middle) <= 3, by_commit
    merged = [kind for n in middle for kind in by_commit[n]]
    return {1: by_commit[numbers[0]], 2: by_commit[numbers[1]], 3: merged, 4: by_commit[numbers[-1]]}


# --- 1. the progress stream on Flink ------------------------------------------------------


def test_progress_stream_on_flink_publishes_each_commit_in_order(tmp_path: Path, scripted_chat_server: Any) -> None:
    scripted_chat_server.set_reply_fn(ScriptedModel(tool_round=True))
    keys = [f"k{i}" for i in range(6)]
    records = [{"key": key, "task": f"{key}#{n}"} for n in range(2) for key in keys]
    env = mini_cluster_env(PARALLELISM)
    builder = (
        _agents_env(env, tmp_path)
        .from_datastream(env.from_collection(records), _record_key)
        .apply(TaskAgent(scripted_chat_server.base_url))
    )
    outputs = builder.to_datastream(progress=True)
    started = time.monotonic()
    with _union(outputs, builder.progress_stream()).execute_and_collect("progress") as collected:
        items = [_classify(item) for item in collected]
    job_s = time.monotonic() - started

    outputs_of = defaultdict(list)
    for output in _of(items, "output"):
        outputs_of[output["key"]].append(output)
    # One output per record, a key's in input order.
    assert {key: [o["task"] for o in outs] for key, outs in outputs_of.items()} == {
        key: [f"{key}#0", f"{key}#1"] for key in keys
    }
    assert all(o["answer"] == f"{o['task']}: ['0', '2', '4']" for outs in outputs_of.values() for o in outs)

    progress = _of(items, "progress")
    runs = _by_run(progress)
    assert sorted(runs) == sorted((key, seq) for key in keys for seq in range(2))
    for (key, seq), run in runs.items():
        assert _tool_results_merged(_kinds_by_commit(run)) == THREE_TOOLS_COMMITS, (key, seq)
        # Commit numbers 1..n with no gap, each publish's records together.
        commits = [r["commit"] for r in run]
        assert commits == sorted(commits) and sorted(set(commits)) == list(range(1, max(commits) + 1))
        assert max(commits) in (4, 5, 6)
        reply = next(r for r in run if r["kind"] == "model_reply")
        assert [c["name"] for c in reply["tool_calls"]] == ["double"] * 3
        assert sorted(r["result"] for r in run if r["kind"] == "tool_result") == [0, 2, 4]
        (output,) = [r["output"] for r in run if r["kind"] == "output"]
        assert output == outputs_of[key][seq]
        assert not any(r.get("replayed") for r in run)
    # A key's records arrive in commit order, its runs one after the other.
    for key in keys:
        order = [(r["seq"], r["commit"]) for r in progress if r["key"] == key]
        assert order == sorted(order), key

    # The local runner, same agent and model: one publish per journal write.
    local_env = AgentsExecutionEnvironment.get_execution_environment()
    local = local_env.from_list([{"key": r["key"], "value": r} for r in records]).apply(
        TaskAgent(scripted_chat_server.base_url)
    )
    local_progress = local.to_progress_list()
    counters = local_env.execute()[0]
    assert counters["journal_writes"] == counters["progress_publishes"]
    assert 4 * len(records) <= counters["journal_writes"] <= 6 * len(records)
    local_runs = _by_run(local_progress)
    assert {run: _tool_results_merged(_kinds_by_commit(rs)) for run, rs in local_runs.items()} == {
        run: _tool_results_merged(_kinds_by_commit(rs)) for run, rs in runs.items()
    }
    print(f"progress job: {job_s:.1f} s")


def test_the_progress_stream_is_opt_in(tmp_path: Path) -> None:
    env = mini_cluster_env(PARALLELISM)
    agents_env = _agents_env(env, tmp_path)
    records = [{"key": "a", "task": "a#0"}]
    builder = agents_env.from_datastream(env.from_collection(records), _record_key).apply(TaskAgent("http://127.0.0.1:9/v1"))
    with pytest.raises(RuntimeError, match=r"progress=True"):
        builder.progress_stream()  # before to_datastream
    builder.to_datastream()
    with pytest.raises(RuntimeError, match=r"opt-in.*to_datastream\(progress=True\)"):
        builder.progress_stream()
    # Steering must come before to_datastream.
    with pytest.raises(RuntimeError, match=r"with_steering\(\) before to_datastream\(\)"):
        builder.with_steering(env.from_collection([{"key": "a", "text": "x"}]), _steering_key)
    # And needs the main input's key selector (not a KeyedStream).
    keyed = agents_env.from_datastream(env.from_collection(records).key_by(_record_key)).apply(
        TaskAgent("http://127.0.0.1:9/v1")
    )
    with pytest.raises(RuntimeError, match=r"not a KeyedStream"):
        keyed.with_steering(env.from_collection([{"key": "a", "text": "x"}]), _steering_key)


# --- 2. steering on Flink -----------------------------------------------------------------


def test_steering_on_flink_reaches_one_model_request_of_its_key_in_order(
    tmp_path: Path, scripted_chat_server: Any
) -> None:
    keys = ["a", "b", "c", "d", "e"]
    records = [{"key": key, "task": f"{key}#{n}"} for n in range(2) for key in keys]
    steering = [{"key": key, "text": f"steer {key} #{j}"} for j in range(3) for key in ("a", "b", "c")]
    steering.append({"key": "nobody", "text": "steer nobody #0"})  # a key without records
    sent: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for message in steering:
        sent[message["key"]].append(message)
    model = ScriptedModel(
        tool_round=True, expected={k: [m["text"] for m in ms] for k, ms in sent.items() if k != "nobody"}
    )
    scripted_chat_server.set_reply_fn(model)
    main_dir, steering_dir = tmp_path / "main", tmp_path / "steering"
    main_dir.mkdir()
    steering_dir.mkdir()
    write_jsonl(main_dir / "records.jsonl", records)
    write_jsonl(steering_dir / "messages.jsonl", steering)

    env = mini_cluster_env(PARALLELISM)
    main = jsonl_stream(env, main_dir, "records", "records-source", "records-decode", monitor_ms=100)
    steer = jsonl_stream(env, steering_dir, "steering", "steering-source", "steering-decode", monitor_ms=100)
    builder = (
        # The model may hold a turn for many rounds until the messages came.
        _agents_env(env, tmp_path, **{"chat.max_tool_rounds": 1000})
        .from_datastream(main, _record_key)
        .apply(TaskAgent(scripted_chat_server.base_url))
        .with_steering(steer, _steering_key)
    )
    outputs = builder.to_datastream(progress=True)
    started = time.monotonic()
    job = Collected(_union(outputs, builder.progress_stream(), builder.error_stream()), "steering")
    items: List[Tuple[str, Any]] = []
    try:
        _take_until(job, items, lambda got: len(_of(got, "output")) == len(records)
                    and len(_finished_runs(got)) == len(records), "all outputs and run_finished records")
        # Nothing more: the next items of a key are its markers'. Markers on
        # the keys with records only: "nobody"'s message stays waiting (a
        # marker turn would take it); those of a, b and c must all have been
        # taken by now (asserted below, and the marker turns took none).
        _take_end_of_run(job, items, main_dir, steering_dir, keys)
    finally:
        job.close()
    job_s = time.monotonic() - started
    items, model_requests = _without_markers(items, scripted_chat_server.requests, keys)
    _assert_no_duplicates(items)

    assert _of(items, "error") == []
    outputs_of = defaultdict(list)
    for output in _of(items, "output"):
        outputs_of[output["key"]].append(output["task"])
    assert dict(outputs_of) == {key: [f"{key}#0", f"{key}#1"] for key in keys}
    assert sorted(_by_run(_of(items, "progress"))) == sorted((key, seq) for key in keys for seq in range(2))

    by_task = _requests_by_task(model_requests)
    assert sorted(by_task) == sorted(r["task"] for r in records)
    delivered: Dict[str, List[Dict[str, Any]]] = defaultdict(list)  # key -> messages, as first seen
    for task, requests in by_task.items():
        key = task.partition("#")[0]
        previous: List[Dict[str, Any]] = []
        for body in requests:
            messages = body["messages"]
            # A request carries its turn's conversation so far: the previous
            # request's messages (steering ones included) come first, unchanged.
            assert messages[:len(previous)] == previous, task
            new_steering = [(p, m) for p, m in _steering_in(messages) if p >= len(previous)]
            previous = messages
            if not new_steering:
                continue
            positions = [p for p, _ in new_steering]
            # They are the request's last messages, right before the model call...
            assert positions == list(range(len(messages) - len(new_steering), len(messages))), task
            # ...after the task, or after all tool results of the round before.
            before = messages[positions[0] - 1]
            if before["role"] == "tool":
                calls = next(m for m in reversed(messages[:positions[0]]) if m.get("tool_calls"))["tool_calls"]
                results = [m for m in messages[:positions[0]] if m["role"] == "tool"][-len(calls):]
                assert sorted(r["tool_call_id"] for r in results) == sorted(c["id"] for c in calls), task
            else:
                assert before["role"] == "user" and json.loads(before["content"]) == {"task": task}, task
            for position, message in new_steering:
                assert messages[position]["role"] == "user"
                assert messages[position]["content"] == json.dumps(message)
                assert message["key"] == key, f"{message} in a request of {task}"
                delivered[key].append(message)
    # Each message reached exactly one request, of its key, in send order.
    assert dict(delivered) == {k: ms for k, ms in sent.items() if k != "nobody"}
    for task, requests in by_task.items():
        for body in requests:
            assert all(m["key"] == task.partition("#")[0] for _, m in _steering_in(body["messages"])), task
    # A message appears only in the requests of the turn that took it.
    for key in sent:
        for message in sent[key]:
            turns = {task for task, requests in by_task.items()
                     if any(m == message for body in requests for _, m in _steering_in(body["messages"]))}
            assert len(turns) == (0 if key == "nobody" else 1), (message, turns)

    consumed = [r for r in _of(items, "progress") if r["kind"] == "steering_consumed" and r["messages"]]
    by_key: Dict[str, List[Any]] = defaultdict(list)
    for record in consumed:
        by_key[record["key"]].extend(_consumed(record))
    assert dict(by_key) == dict(delivered)
    # Each run's progress still has one commit per journal write, in order,
    # and its steering_consumed record precedes the model reply it fed.
    for (key, seq), run in _by_run(_of(items, "progress")).items():
        commits = [r["commit"] for r in run]
        assert commits == sorted(commits) and sorted(set(commits)) == list(range(1, max(commits) + 1)), (key, seq)
        for index, record in enumerate(run):
            if record["kind"] == "steering_consumed" and record["messages"]:
                reply = next(i for i, r in enumerate(run) if r["kind"] == "model_reply" and r["step"] == record["step"])
                assert reply > index, (key, seq, record)
    print(f"steering job: {job_s:.1f} s, {len(model_requests)} model requests, "
          f"{max(len(rs) for rs in by_task.values())} at most in one turn")


# --- 3. the steering queue bound on Flink -------------------------------------------------


def test_steering_queue_on_flink_holds_32_per_key_and_reports_the_rest(
    tmp_path: Path, scripted_chat_server: Any
) -> None:
    scripted_chat_server.set_reply_fn(ScriptedModel(tool_round=False))
    main_dir, steering_dir = tmp_path / "main", tmp_path / "steering"
    main_dir.mkdir()
    steering_dir.mkdir()
    env = mini_cluster_env(PARALLELISM)
    main = jsonl_stream(env, main_dir, "records", "records-source", "records-decode", monitor_ms=100)
    steer = jsonl_stream(env, steering_dir, "steering", "steering-source", "steering-decode", monitor_ms=100)
    builder = (
        _agents_env(env, tmp_path)
        .from_datastream(main, _record_key)
        .apply(TaskAgent(scripted_chat_server.base_url))
        .with_steering(steer, _steering_key)
    )
    outputs = builder.to_datastream(progress=True)
    started = time.monotonic()
    job = Collected(_union(outputs, builder.progress_stream(), builder.error_stream()), "steering-queue")
    items: List[Tuple[str, Any]] = []

    def messages(key: str, first: int, count: int) -> List[Dict[str, Any]]:
        return [{"key": key, "text": f"steer {key} #{j}"} for j in range(first, first + count)]

    def outputs_done(*tasks: str) -> Callable[[List[Tuple[str, Any]]], bool]:
        return lambda got: set(tasks) <= {o["task"] for o in _of(got, "output")}

    def errors_done(count: int) -> Callable[[List[Tuple[str, Any]]], bool]:
        return lambda got: len(_of(got, "error")) >= count

    # "fresh" never had a record; "ended" had one whose turn ended before its messages.
    fresh_1 = messages("fresh", 0, MAX_STEERING_QUEUE + 3)
    ended_1 = messages("ended", 0, MAX_STEERING_QUEUE + 1)
    fresh_2 = messages("fresh", 100, MAX_STEERING_QUEUE + 1)
    try:
        write_jsonl(main_dir / "1.jsonl", [{"key": "ended", "task": "ended#0"}])
        _take_until(job, items, outputs_done("ended#0"), "the output of ended#0")
        write_jsonl(steering_dir / "1.jsonl", [m for pair in zip(fresh_1, ended_1) for m in pair] + fresh_1[len(ended_1):])
        _take_until(job, items, errors_done(4), "4 error records of full queues")
        errors_1 = _of(items, "error")
        write_jsonl(main_dir / "2.jsonl", [{"key": "fresh", "task": "fresh#0"}, {"key": "ended", "task": "ended#1"}])
        _take_until(job, items, outputs_done("fresh#0", "ended#1"), "the outputs of fresh#0 and ended#1")
        # The 32 taken left the key's state: 32 fit again, one more does not.
        write_jsonl(steering_dir / "2.jsonl", fresh_2)
        _take_until(job, items, errors_done(5), "the error record of the second full queue")
        write_jsonl(main_dir / "3.jsonl", [{"key": "fresh", "task": "fresh#1"}])
        _take_until(job, items, lambda got: outputs_done("fresh#1")(got) and len(_finished_runs(got)) == 4,
                    "the output of fresh#1 and every run_finished record")
        # Nothing more: the next items of a key are its markers' (both keys'
        # queues were emptied by fresh#1 and ended#1: the marker turns take
        # nothing, and 33 marker messages report exactly the last).
        _take_end_of_run(job, items, main_dir, steering_dir, ["fresh", "ended"])
    finally:
        job.close()
    job_s = time.monotonic() - started
    items, model_requests = _without_markers(items, scripted_chat_server.requests, ["fresh", "ended"])
    _assert_no_duplicates(items)

    # What did not fit was reported, not dropped: one error record each.
    errors = _of(items, "error")
    expected_errors = fresh_1[MAX_STEERING_QUEUE:] + ended_1[MAX_STEERING_QUEUE:] + fresh_2[MAX_STEERING_QUEUE:]
    assert sorted((e["key"], e["record"]["text"]) for e in errors) == sorted(
        (m["key"], m["text"]) for m in expected_errors
    )
    assert [e["record"] for e in errors_1 if e["key"] == "fresh"] == fresh_1[MAX_STEERING_QUEUE:]
    for error in errors:
        assert error["action"] == "steering" and error["error_type"] == "SteeringQueueFull"
        assert error["seq"] is None and error["attempts"] == 0
        text = error["error_message"]
        assert "full" in text and repr(error["key"]) in text and repr(error["record"]) in text, text

    # The next turn's first (here: only) model request carries the 32 queued, in order.
    by_task = _requests_by_task(model_requests)
    expected_delivery = {
        "ended#0": [],
        "fresh#0": fresh_1[:MAX_STEERING_QUEUE],
        "ended#1": ended_1[:MAX_STEERING_QUEUE],
        "fresh#1": fresh_2[:MAX_STEERING_QUEUE],
    }
    assert sorted(by_task) == sorted(expected_delivery)
    for task, expected in expected_delivery.items():
        (body,) = by_task[task]
        messages_sent = body["messages"]
        assert json.loads(messages_sent[0]["content"]) == {"task": task}
        assert [m["role"] for m in messages_sent[1:]] == ["user"] * len(expected), task
        assert [json.loads(m["content"]) for m in messages_sent[1:]] == expected, task
    # Each sent message: delivered once or reported once, never both, never neither.
    for key, sent in (("fresh", fresh_1 + fresh_2), ("ended", ended_1)):
        delivered = [m for task, ms in expected_delivery.items() if task.startswith(key) for m in ms]
        reported = [e["record"] for e in errors if e["key"] == key]
        assert sorted(json.dumps(m) for m in delivered + reported) == sorted(json.dumps(m) for m in sent)

    progress = _of(items, "progress")
    assert sorted(f"{key}#{seq}" for key, seq in _by_run(progress)) == sorted(expected_delivery)
    for (key, seq), run in _by_run(progress).items():
        task = f"{key}#{seq}"
        consumed = [m for r in run if r["kind"] == "steering_consumed" for m in _consumed(r)]
        assert consumed == expected_delivery[task], task
    assert sorted(o["task"] for o in _of(items, "output")) == sorted(expected_delivery)
    print(f"steering queue job: {job_s:.1f} s")


# --- 4. steering on the local runner ------------------------------------------------------


def test_local_runner_steering_reaches_the_first_model_request_and_bounds_the_queue(
    scripted_chat_server: Any,
) -> None:
    scripted_chat_server.set_reply_fn(ScriptedModel(tool_round=True))
    steering = [{"key": "a", "value": {"key": "a", "text": f"steer a #{j}"}} for j in range(3)]
    steering += [{"key": "c", "value": {"key": "c", "text": f"steer c #{j}"}} for j in range(MAX_STEERING_QUEUE + 1)]
    env = AgentsExecutionEnvironment.get_execution_environment()
    builder = (
        env.from_list([{"key": key, "value": {"key": key, "task": f"{key}#0"}} for key in ("a", "b", "c")])
        .apply(TaskAgent(scripted_chat_server.base_url))
        .with_steering(steering)
    )
    outputs, progress, errors = builder.to_list(), builder.to_progress_list(), builder.to_error_list()
    counters = env.execute()[0]

    assert sorted(next(iter(o.values()))["task"] for o in outputs) == ["a#0", "b#0", "c#0"]
    by_task = _requests_by_task(scripted_chat_server.requests)
    sent = {"a": [m["value"] for m in steering if m["key"] == "a"],
            "c": [m["value"] for m in steering if m["key"] == "c"][:MAX_STEERING_QUEUE]}
    for key in ("a", "b", "c"):
        first, *later = by_task[f"{key}#0"]
        expected = sent.get(key, [])
        # The first request: the task, then the key's messages in order.
        assert [m["role"] for m in first["messages"]] == ["user"] * (1 + len(expected))
        assert [m for _, m in _steering_in(first["messages"])] == expected
        # Later requests of the turn carry them as history only.
        for body in later:
            assert [m for _, m in _steering_in(body["messages"])] == expected

    assert len(errors) == 1
    (error,) = errors
    assert error["key"] == "c" and error["record"] == steering[-1]["value"]
    assert error["action"] == "steering" and error["error_type"] == "SteeringQueueFull"
    assert "full" in error["error_message"] and "'c'" in error["error_message"]

    consumed = defaultdict(list)
    for record in progress:
        if record["kind"] == "steering_consumed":
            consumed[record["key"]].extend(_consumed(record))
    assert {key: messages for key, messages in consumed.items() if messages} == sent
    assert counters["journal_writes"] == counters["progress_publishes"]


def echo_record(event: InputEvent, ctx: Any) -> None:
    ctx.send_event(OutputEvent(output=event.input))


class EchoAgent(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.add_action("echo", [InputEvent], echo_record)


def test_with_steering_keeps_each_keys_input_order(tmp_path: Path) -> None:
    records = [{"key": f"k{i % 5}", "x": i} for i in range(300)]
    env = mini_cluster_env(PARALLELISM)
    builder = _agents_env(env, tmp_path).from_datastream(env.from_collection(records), _record_key)
    builder.with_steering(env.from_collection([{"key": "k0", "text": "hi"}]), _steering_key)
    outputs = builder.apply(EchoAgent()).to_datastream()
    with outputs.execute_and_collect("order") as collected:
        got = list(collected)
    by_key: Dict[str, List[int]] = defaultdict(list)
    for record in got:
        by_key[record["key"]].append(record["x"])
    assert by_key == {f"k{k}": list(range(k, 300, 5)) for k in range(5)}
