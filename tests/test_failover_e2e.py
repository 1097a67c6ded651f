"""Failover end to end on the local mini-cluster.

1. A Python worker killed mid-run (``os._exit`` inside a tool) fails the job;
   Flink restarts it from the last checkpoint and the re-run replays journaled
   model replies instead of asking again: exactly one output per input, and
   no model request repeated except the one the journal permits (a call in
   flight at the crash).
2. A job cancelled with a retained checkpoint, restored into a new job that
   reads more input, continues each key's short-term memory and does not read
   the old input again.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import socket
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
from jobs.review_analysis import MODEL_SETUP, ReviewAnalysisAgent, product_id_of

pytestmark = pytest.mark.e2e

# The crash tool below runs in Flink's Python worker processes, which cannot
# import this test module by name: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

N_REVIEWS = 500
CRASH_INPUT = 249  # the 250th input (or the next one whose request is unique)
PARALLELISM = 2
RESTART_DELAY_S = 1.0
RUNS_SUFFIX = ".runs"


# --- the agent under test ----------------------------------------------------------


class CrashingReviewAgent(ReviewAnalysisAgent):
    """The review-analysis agent, with a tool that kills the Python worker
    the first time it runs, offered to the model beside the job's own tool."""

    def __init__(self, base_url: str) -> None:
        super().__init__(model="openai:scripted", base_url=base_url, max_retries=0)
        setups = self.resources[ResourceType.CHAT_MODEL]
        setup = setups.pop(MODEL_SETUP)
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

        Every run appends a line to ``<marker>.runs``; the first one creates the
        marker (recording when) and exits the process without any cleanup.

        Args:
            marker: The marker file's path.
        """
        with open(marker + RUNS_SUFFIX, "a", encoding="utf-8") as runs:
            runs.write(f"{os.getpid()}\n")
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


class ScriptedReviewModel:
    """The model's side of the conversation, and when each request came."""

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


def _tool_call(name: str, arguments: Dict[str, Any]) -> Dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


def _expected_requests(reviews: List[Dict[str, Any]]) -> Counter:
    """Requests of a run without failures: one per record and round."""
    expected: Counter = Counter()
    for review in reviews:
        expected[(review["id"], review["review"], 0)] += 1
        if _notifies(review["review"]):
            expected[(review["id"], review["review"], 1)] += 1
    return expected


# --- Flink plumbing ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _flink_env(checkpoint_dir: Path, checkpoint_ms: int, parallelism: int, **options: str):
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    config = Configuration()
    settings = {
        "python.executable": sys.executable,
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": f"{int(RESTART_DELAY_S * 1000)} ms",
        "execution.checkpointing.interval": f"{checkpoint_ms} ms",
        "execution.checkpointing.dir": checkpoint_dir.as_uri(),
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        **options,
    }
    for key, value in settings.items():
        config.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(parallelism)
    assert env.get_checkpoint_config().get_checkpoint_interval() == checkpoint_ms
    return env


def _review_stream(env: Any, directory: Path, monitor_ms: int | None = None) -> Any:
    """JSON-decoded lines of the files in ``directory``, through a replayable
    (checkpointed) source; uids let a restore map the source's state."""
    from pyflink.common import Duration, Types, WatermarkStrategy
    from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(directory))
    if monitor_ms is not None:
        builder = builder.monitor_continuously(Duration.of_millis(monitor_ms))
    lines = env.from_source(builder.build(), WatermarkStrategy.no_watermarks(), "reviews").uid("reviews-source")
    return lines.map(json.loads, output_type=Types.PICKLED_BYTE_ARRAY()).name("decode").uid("decode-reviews")


def _agent_outputs(env: Any, reviews: Any, agent: Any, **config: Any) -> Any:
    from pyflink.common import Types

    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **config)
    return agents_env.from_datastream(reviews, product_id_of, key_type=Types.STRING()).apply(agent).to_datastream()


def _write_jsonl(path: Path, records: List[Dict[str, Any]]) -> None:
    """Write atomically: a monitoring source never sees half a file (names
    starting with '.' are hidden from it)."""
    hidden = path.with_name("." + path.name)
    hidden.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    hidden.replace(path)


def _completed_checkpoints(root: Path) -> List[Path]:
    """``chk-N`` directories holding a ``_metadata`` file, oldest first."""
    done = [m.parent for m in root.glob("*/chk-*/_metadata")]
    return sorted(done, key=lambda d: int(d.name.split("-", 1)[1]))


class AgentMetrics:
    """Polls the mini-cluster's REST API for the agent operator's counters
    (group ``flink_agents``), per subtask, keeping the latest values of each
    execution attempt (counters start again from zero after a restart)."""

    NAMES = ("records", "journal_writes", "calls_executed", "calls_replayed", "steps_replayed")

    def __init__(self, port: int) -> None:
        self._base = f"http://127.0.0.1:{port}"
        self.latest: Dict[Tuple[int, int], Dict[str, int]] = {}  # (subtask, attempt) -> counters
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-metrics", daemon=True)

    def __enter__(self) -> "AgentMetrics":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self._base + path, timeout=2) as response:
            return json.load(response)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._poll()
            except Exception:  # the cluster is starting, restarting or gone
                continue

    def _poll(self) -> None:
        for job in self._get("/jobs")["jobs"]:
            if job["status"] != "RUNNING":
                continue
            detail = self._get(f"/jobs/{job['id']}")
            for vertex in detail["vertices"]:
                if "agent:" not in vertex["name"]:
                    continue
                base = f"/jobs/{job['id']}/vertices/{vertex['id']}"
                attempts = {
                    s["subtask"]: s.get("attempt", 0)
                    for s in self._get(f"{base}/subtasktimes").get("subtasks", [])
                } if False else None
                available = [m["id"] for m in self._get(f"{base}/metrics")]
                wanted = [m for m in available if m.split(".flink_agents.")[-1] in self.NAMES and ".flink_agents." in m]
                if not wanted:
                    continue
                values = self._get(f"{base}/metrics?get=" + ",".join(wanted))
                self._store(values, attempts)

    def _store(self, values: List[Dict[str, Any]], attempts: Any) -> None:
        by_subtask: Dict[int, Dict[str, int]] = defaultdict(dict)
        for metric in values:
            subtask = int(metric["id"].split(".", 1)[0])
            by_subtask[subtask][metric["id"].rsplit(".", 1)[1]] = int(float(metric["value"]))
        for subtask, counters in by_subtask.items():
            attempt = max((a for s, a in self.latest if s == subtask), default=0)
            previous = self.latest.get((subtask, attempt))
            if previous is not None and counters.get("records", 0) < previous.get("records", 0):
                attempt += 1  # counters fell back: a new execution attempt
            self.latest[(subtask, attempt)] = counters
