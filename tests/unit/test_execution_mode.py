"""Which Python execution mode a job runs in on each target, and how a
session cluster's set-up for thread mode is read from its REST API
(``flink_agents.runtime.flink.execution_mode``). The cluster runs are in
``tests/e2e/test_standalone_cluster_e2e.py``."""

from __future__ import annotations

import logging
import os
import urllib.error

import pytest

from flink_agents.runtime.flink.execution_mode import (
    ThreadModeReadiness,
    ThreadModeUnsupported,
    python_workers,
    resolve_execution_mode,
    thread_mode_readiness,
)

REST = "http://jm.example:8081"
SESSION = {"execution.target": "remote", "rest.address": "jm.example", "rest.port": "8081"}
READY = ThreadModeReadiness(True, (), "set up")
NOT_READY = ThreadModeReadiness(False, ("'pemja.' in classloader.parent-first-patterns.additional",), "lacks it")
UNREACHABLE = ThreadModeReadiness(False, None, "could not read the cluster's set-up: refused")


def _answers(config: dict, classpath: list):
    """A fetch answering the two REST paths like a JobManager."""
    def fetch(url: str):
        if url == f"{REST}/jobmanager/config":
            return [{"key": k, "value": v} for k, v in config.items()]
        if url == f"{REST}/jobmanager/environment":
            return {"jvm": {}, "classpath": classpath}
        raise AssertionError(f"unexpected request {url}")
    return fetch


STOCK_CLASSPATH = ["/opt/flink/lib/flink-dist-2.3.0.jar", "/opt/flink/lib/flink-csv-2.3.0.jar"]
SET_UP_CLASSPATH = [*STOCK_CLASSPATH, "/opt/flink/lib/flink-python-2.3.0.jar"]


def test_a_stock_cluster_lacks_both_and_a_set_up_one_is_ready():
    stock = thread_mode_readiness(REST, _answers({"rest.port": "8081"}, STOCK_CLASSPATH))
    assert not stock.ready
    assert stock.missing == ("'pemja.' in classloader.parent-first-patterns.additional",
                             "flink-python on the class path (lib/)")
    set_up = thread_mode_readiness(
        REST, _answers({"classloader.parent-first-patterns.additional": "org.example.;pemja."}, SET_UP_CLASSPATH))
    assert set_up.ready and set_up.missing == ()
    # A broader pattern covers pemja's classes too; a jar in opt/ only is not on the class path.
    broad = thread_mode_readiness(REST, _answers({"classloader.parent-first-patterns.additional": "pem"},
                                                 STOCK_CLASSPATH))
    assert broad.missing == ("flink-python on the class path (lib/)",)


def test_a_cluster_that_does_not_answer_is_unknown_not_an_error():
    def refused(url: str):
        raise urllib.error.URLError("Connection refused")

    state = thread_mode_readiness(REST, refused)
    assert (state.ready, state.missing) == (False, None)
    assert "Connection refused" in state.reason and REST in state.reason


@pytest.mark.parametrize("target", [None, "local", "minicluster"])
def test_on_the_mini_cluster_the_mode_asked_for_holds_and_none_is_thread(target):
    config = {} if target is None else {"execution.target": target}
    never = lambda url: pytest.fail("the mini-cluster needs no cluster check")  # noqa: E731
    assert resolve_execution_mode(None, config, never) == "thread"
    for mode in ("thread", "process", "loopback"):
        assert resolve_execution_mode(mode, config, never) == mode


def test_on_a_session_cluster_none_follows_its_set_up(caplog):
    asked = []
    assert resolve_execution_mode(None, SESSION, lambda url: asked.append(url) or READY) == "thread"
    assert asked == [REST]
    with caplog.at_level(logging.WARNING, logger="flink_agents.runtime.flink.execution_mode"):
        assert resolve_execution_mode(None, SESSION, lambda url: NOT_READY) == "process"
        assert resolve_execution_mode(None, SESSION, lambda url: UNREACHABLE) == "process"
    assert "running in process mode: lacks it" in caplog.text


def test_thread_on_a_session_cluster_not_set_up_is_refused_naming_the_fix():
    with pytest.raises(ThreadModeUnsupported) as refused:
        resolve_execution_mode("thread", SESSION, lambda url: NOT_READY)
    message = str(refused.value)
    assert f"session cluster at {REST}" in message and "execution.target: remote" in message
    assert "loadedLibraryNames" in message
    assert "opt/flink-python-*.jar) in the cluster's lib/" in message and "--execution-mode process" in message
    assert resolve_execution_mode("thread", SESSION, lambda url: READY) == "thread"
    assert resolve_execution_mode("thread", SESSION, lambda url: UNREACHABLE) == "thread"  # asked, unchecked


def test_process_and_loopback_on_clusters_are_process_without_asking():
    never = lambda url: pytest.fail("process mode needs no cluster check")  # noqa: E731
    for mode in ("process", "loopback"):
        assert resolve_execution_mode(mode, SESSION, never) == "process"
    # Application mode runs one job per cluster: thread mode works there as shipped.
    application = {"execution.target": "kubernetes-application"}
    assert resolve_execution_mode(None, application, never) == "thread"
    assert resolve_execution_mode("loopback", application, never) == "process"


def test_the_rest_endpoint_comes_from_the_job_configuration():
    asked = []
    resolve_execution_mode(None, {"execution.target": "remote", "jobmanager.rpc.address": "jm2"},
                           lambda url: asked.append(url) or READY)
    resolve_execution_mode(None, {**SESSION, "security.ssl.rest.enabled": "true"},
                           lambda url: asked.append(url) or READY)
    assert asked == ["http://jm2:8081", "https://jm.example:8081"]


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="must be one of thread, process, loopback or None, not 'threads'"):
        resolve_execution_mode("threads", {})


def test_process_turns_loopback_off_only_while_the_environment_is_created(monkeypatch):
    monkeypatch.delenv("_python_worker_execution_mode", raising=False)
    with python_workers("process"):
        assert os.environ["_python_worker_execution_mode"] == "process"
    assert "_python_worker_execution_mode" not in os.environ
    monkeypatch.setenv("_python_worker_execution_mode", "loopback")
    with python_workers("process"):
        assert os.environ["_python_worker_execution_mode"] == "process"
    assert os.environ["_python_worker_execution_mode"] == "loopback"
    with python_workers("loopback"), python_workers("thread"):
        assert os.environ["_python_worker_execution_mode"] == "loopback"
