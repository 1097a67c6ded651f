"""The event log and the metrics on the mini-cluster: the file log of a
Flink job's events (0.3.1's keys), and the actions' metrics in Flink's REST
API while the job runs (the rest is tests/engine/test_event_log.py)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, Dict, List

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext
from tests.support.ports import free_port


class FlinkMeteredAgent(Agent):
    """Reports one metric of each kind, in a key-value sub-group too, after
    a journaled call; a record with a ``release`` path first waits until
    that file exists (the test creates it once it has read Flink's REST
    API), so the job is still running while the metrics are read."""

    @action(InputEvent)
    @staticmethod
    async def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        release = event.input.get("release")
        if release:
            deadline = time.monotonic() + RELEASE_TIMEOUT_S
            while not os.path.exists(release) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        doubled = await ctx.durable_execute_async(_double, event.input["x"])
        ctx.agent_metric_group.get_counter("numInputs").inc()
        ctx.agent_metric_group.get_meter("numInputsPerSec").mark()
        ctx.action_metric_group.get_histogram("valueSeen").update(event.input["x"])
        ctx.agent_metric_group.get_sub_group("shop", "books").get_gauge("lastValue").update(event.input["x"])
        ctx.send_event(OutputEvent(output={"k": event.input["k"], "doubled": doubled}))


HELD = (9, 10, 11)  # the last record of each key: every subtask with a key keeps running
RELEASE_TIMEOUT_S = 150.0  # past the test's own 120 s wait: a stuck test still ends


def _double(x: int) -> int:
    return 2 * x


def _operator_metrics(port: int, names: List[str], until: Any, timeout_s: float) -> Dict[str, float]:
    """Flink's REST view of the agent operator's metrics, summed over its
    subtasks (``<subtask>.<operator>.<metric>``), polled until ``until(values)``."""
    import urllib.request

    base = f"http://127.0.0.1:{port}"
    values: Dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            for job in json.load(urllib.request.urlopen(f"{base}/jobs", timeout=5))["jobs"]:
                vertices = json.load(urllib.request.urlopen(f"{base}/jobs/{job['id']}", timeout=5))["vertices"]
                for vertex in vertices:
                    url = f"{base}/jobs/{job['id']}/vertices/{vertex['id']}/metrics"
                    ids = [m["id"] for m in json.load(urllib.request.urlopen(url, timeout=5))
                           if m["id"].split(".", 2)[-1] in names]
                    if ids:
                        found = json.load(urllib.request.urlopen(f"{url}?get={','.join(ids)}", timeout=5))
                        values = {}
                        for metric in found:
                            name = metric["id"].split(".", 2)[-1]
                            text = str(metric["value"])
                            number = float(text) if text.replace(".", "", 1).isdigit() else text
                            values[name] = values.get(name, 0) + number if isinstance(number, float) else number
            if until(values):
                return values
        except OSError:
            pass  # the REST endpoint is not up yet
        time.sleep(0.2)
    return values


def test_event_log_and_metrics_on_the_mini_cluster(tmp_path) -> None:
    import sys

    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    port = free_port()
    config = Configuration()
    config.set_string("restart-strategy.type", "none")
    config.set_string("python.executable", sys.executable)
    config.set_string("rest.port", str(port))
    config.set_string("metrics.fetcher.update-interval", "200")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(2)
    log_dir = tmp_path / "event-log"
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **{
        "journal.sqlite.path": str(tmp_path / "journal.db"),
        "baseLogDir": str(log_dir),
        "event-log.standard.max-string-length": 8,
    })
    release = tmp_path / "release"
    records = [{"k": f"key-{i % 3}", "x": i, "note": "n" * 20} for i in range(12)]
    for x in HELD:
        records[x]["release"] = str(release)
    stream = agents_env.from_datastream(env.from_collection(records), lambda r: r["k"]).apply(
        FlinkMeteredAgent()
    ).to_datastream()
    wanted = ["numInputs", "numOfEventProcessed", "action.on_input.numOfActionsExecuted",
              "action.on_input.valueSeen", "numInputsPerSec", "shop.books.lastValue"]
    with stream.execute_and_collect("event-log-and-metrics") as collected:
        # While the held records wait, the other nine are done and their
        # metrics reached Flink (the operator mirrors them in its callbacks).
        # A subtask with nothing in flight would finish at the end of input
        # and its metrics leave the REST view: each key holds its last record.
        try:
            metrics = _operator_metrics(port, wanted, lambda v: v.get("numInputs") == 9, timeout_s=120.0)
        finally:
            release.touch()
        outputs = list(collected)

    assert metrics.get("numInputs") == 9, metrics
    assert metrics["action.on_input.numOfActionsExecuted"] == 9
    assert metrics["numOfEventProcessed"] >= 18  # input and output of each finished record
    assert "count=" in str(metrics["action.on_input.valueSeen"])  # a Flink distribution
    assert "numInputsPerSec" in metrics and "shop.books.lastValue" in metrics  # a meter, a gauge
    assert sorted(o["doubled"] for o in outputs) == [2 * i for i in range(12)]
    files = sorted(log_dir.iterdir())
    assert files and all(f.name.startswith("events-") and f.name.endswith(".log") for f in files)
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    inputs = [line for line in lines if line["eventType"] == "_input_event"]
    assert sorted(line["event"]["input"]["x"] for line in inputs) == list(range(12))
    assert all(line["event"]["input"]["note"] == {"truncatedString": "nnnnnnnn...", "omittedChars": 12}
               for line in inputs)
    assert len([line for line in lines if line["eventType"] == "_output_event"]) == 12
    assert all(line["handledBy"] == ["on_input"] and line["key"] == line["event"]["input"]["k"] for line in inputs)
