"""The agent's metrics reach Flink's Prometheus reporter on the mini-cluster,
configured in the job's configuration or in ``$FLINK_CONF_DIR/config.yaml``
(``runtime.flink.metric_reporters``), scraped while the job runs."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest
from prometheus_client.parser import text_string_to_metric_families

from flink_agents.api.agents.agent import Agent
from flink_agents.api.decorators import action
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.execution_environment import AgentsExecutionEnvironment
from flink_agents.api.runner_context import RunnerContext
from tests.support.ports import free_port

PROMETHEUS_FACTORY = "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"
JOB_NAME = "prometheus_metrics"  # label values keep [a-zA-Z0-9:_] only: "-" would read "_"
OPERATOR = "agent:PromMeteredAgent"
RELEASE_TIMEOUT_S = 60.0  # past the scrape's own 40 s: a stuck test still ends
FINISHED = 3  # records done before the held one


class PromMeteredAgent(Agent):
    """Counts its inputs; a record with a ``release`` path waits until that
    file exists, so the job still runs while the test scrapes."""

    @action(InputEvent)
    @staticmethod
    async def on_input(event: InputEvent, ctx: RunnerContext) -> None:
        release = event.input.get("release")
        if release:
            deadline = time.monotonic() + RELEASE_TIMEOUT_S
            while not os.path.exists(release) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        ctx.agent_metric_group.get_counter("numInputs").inc()
        ctx.send_event(OutputEvent(output=event.input["x"]))


def _agent_samples(text: str) -> Dict[str, List]:
    """The samples of the agent operator in a scrape: name -> samples."""
    samples: Dict[str, List] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("operator_name") == OPERATOR and sample.labels.get("job_name") == JOB_NAME:
                samples.setdefault(sample.name, []).append(sample)
    return samples


def _scrape_until_done(port: int, timeout_s: float) -> tuple[str, Dict[str, List]]:
    """Scrape ``/metrics`` until the finished records show in every series checked."""
    text, samples = "", {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            pass  # the reporter is not up yet
        samples = _agent_samples(text)
        # Each series moves on its own reporter read: wait until every one
        # the test checks has caught up with the finished records.
        caught_up = [samples.get(f"flink_taskmanager_job_task_operator_{name}", [])
                     for name in ("numOfActionsExecuted", "numInputs", "flink_agents_records")]
        if all(series and max(s.value for s in series) >= FINISHED for series in caught_up):
            break
        time.sleep(0.3)
    return text, samples


@pytest.mark.parametrize("where", ["job-config", "flink-conf-dir"])
def test_agent_metrics_on_the_prometheus_reporter(tmp_path: Path, monkeypatch, where: str) -> None:
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    port = free_port()
    config = Configuration()
    config.set_string("restart-strategy.type", "none")
    config.set_string("python.executable", sys.executable)
    if where == "job-config":
        config.set_string("metrics.reporter.prom.factory.class", PROMETHEUS_FACTORY)
        config.set_string("metrics.reporter.prom.port", str(port))
    else:  # nested YAML, as a user writes it; read by the runner, not by the mini-cluster
        conf_dir = tmp_path / "conf"
        conf_dir.mkdir()
        (conf_dir / "config.yaml").write_text(
            f"metrics:\n  reporter:\n    prom:\n      factory.class: {PROMETHEUS_FACTORY}\n      port: {port}\n"
        )
        monkeypatch.setenv("FLINK_CONF_DIR", str(conf_dir))
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    agents_env = AgentsExecutionEnvironment.get_execution_environment(
        env, **{"journal.sqlite.path": str(tmp_path / "journal.db")}
    )
    release = tmp_path / "release"
    records = [{"k": "a", "x": i} for i in range(FINISHED)] + [{"k": "a", "x": 99, "release": str(release)}]
    stream = agents_env.from_datastream(env.from_collection(records), lambda r: r["k"]).apply(
        PromMeteredAgent()
    ).to_datastream()
    with stream.execute_and_collect(JOB_NAME) as collected:
        try:
            text, samples = _scrape_until_done(port, timeout_s=40.0)
        finally:
            release.touch()
        outputs = list(collected)

    assert sorted(outputs) == [0, 1, 2, 99]
    assert samples, f"no sample of {OPERATOR} on the reporter; scraped:\n{text[:2000]}"

    def value(name: str, **labels: str) -> float:
        found = [s.value for s in samples.get(f"flink_taskmanager_job_task_operator_{name}", [])
                 if all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(found) == 1, (name, labels, sorted(samples))
        return found[0]

    # The engine's built-in metrics and the action's own counter, mirrored
    # into the operator's metric group (runtime.flink.metrics).
    assert value("numOfActionsExecuted") == FINISHED
    assert value("numInputs") == FINISHED
    assert value("numOfEventProcessed") >= 2 * FINISHED  # input and output of each finished record
    # A key-value group becomes a label: the per-action counter.
    assert value("action_numOfActionsExecuted", action="on_input") == FINISHED
    # A histogram's window as numbers beside it (a distribution prints as 0.0).
    assert value("action_actionExecutionTimeMsMax", action="on_input") >= value(
        "action_actionExecutionTimeMsMean", action="on_input") >= value("action_actionExecutionTimeMsMin", action="on_input")
    assert "flink_taskmanager_job_task_operator_action_actionExecutionTimeMsMean" in samples
    assert "flink_taskmanager_job_task_operator_numOfEventProcessedPerSec" in samples
    # The operator's own counters, in its group flink_agents.
    assert value("flink_agents_records") >= FINISHED
