"""A job run on its own keeps the mini-cluster's servers on loopback
(``runtime/flink/loopback.py``); a job's own choice and a cluster's
``config.yaml`` are left alone. The real job's sockets:
``tests/e2e/test_review_job_e2e.py``."""

from __future__ import annotations

import pytest

from flink_agents.runtime.flink.loopback import loopback_options

ALL = {"rest.bind-address": "127.0.0.1", "jobmanager.bind-host": "127.0.0.1", "taskmanager.bind-host": "127.0.0.1"}


@pytest.mark.parametrize("target", [None, "", "local", "LOCAL", "minicluster"])
def test_a_job_on_the_mini_cluster_binds_every_server_to_loopback(target) -> None:
    config = {} if target is None else {"execution.target": target}
    assert loopback_options(config) == ALL


def test_an_address_the_job_chose_is_kept() -> None:
    chosen = loopback_options({"execution.target": "local", "rest.bind-address": "0.0.0.0"})
    assert chosen == {"jobmanager.bind-host": "127.0.0.1", "taskmanager.bind-host": "127.0.0.1"}


@pytest.mark.parametrize("target", ["remote", "yarn-session", "kubernetes-session", "kubernetes-application"])
def test_a_job_submitted_to_a_cluster_changes_nothing(target) -> None:
    assert loopback_options({"execution.target": target}) == {}
