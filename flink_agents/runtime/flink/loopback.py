"""The mini-cluster's servers on loopback only.

A job run on its own (``python my_job.py``: PyFlink's local executor starts a
mini-cluster in the client's JVM) opens the cluster's servers on every
network interface, as Flink's own defaults have them: the REST endpoint
(``rest.bind-address`` unset: ``0.0.0.0``), which takes job submissions and
cancellations from anyone who reaches it, and the JobManager's and
TaskManager's other endpoints (``jobmanager.bind-host``,
``taskmanager.bind-host``; Flink's configuration reference: "If not
configured, '0.0.0.0' will be used"). Nothing outside this machine needs them
for a job of one process, so where the job set none of these options they
bind to 127.0.0.1. A job that wants its web UI reachable from elsewhere sets
``rest.bind-address`` itself (it is kept). Submitted to a cluster (``flink
run``: ``execution.target`` remote, a session or application target), the
job changes nothing: the cluster's ``config.yaml`` decides.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from flink_agents.runtime.flink.execution_mode import LOCAL_TARGETS

__all__ = ["LOOPBACK", "bind_mini_cluster_to_loopback", "loopback_options"]

LOOPBACK = "127.0.0.1"
# Flink's options for the address each of the mini-cluster's servers binds.
_BIND_OPTIONS = ("rest.bind-address", "jobmanager.bind-host", "taskmanager.bind-host")


def loopback_options(config: Mapping[str, Any]) -> Dict[str, str]:
    """The options to set so a mini-cluster binds loopback only: each of
    ``rest.bind-address``, ``jobmanager.bind-host`` and
    ``taskmanager.bind-host`` that ``config`` (flat Flink keys) leaves unset,
    as ``127.0.0.1``; nothing when ``execution.target`` names a cluster."""
    target = str(config.get("execution.target") or "").strip().lower()
    if target not in LOCAL_TARGETS:
        return {}
    return {key: LOOPBACK for key in _BIND_OPTIONS if not str(config.get(key) or "").strip()}


def bind_mini_cluster_to_loopback(env: Any) -> Dict[str, str]:
    """Apply ``loopback_options`` to a PyFlink ``StreamExecutionEnvironment``
    before it executes (the local executor reads the options when it starts
    the mini-cluster); returns what was set."""
    from pyflink.util.java_utils import get_j_env_configuration

    j_config = get_j_env_configuration(env._j_stream_execution_environment)
    flat = {str(key): str(value) for key, value in dict(j_config.toMap()).items()}
    chosen = loopback_options(flat)
    for key, value in chosen.items():
        j_config.setString(key, value)
    return chosen
