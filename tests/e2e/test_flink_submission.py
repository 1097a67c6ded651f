"""``configure_python_workers``: what a job sets for its Python workers so
that ``flink run`` works on a cluster (the cluster runs are in
``tests/e2e/test_standalone_cluster_e2e.py``)."""

from __future__ import annotations

import logging
import os
import site
import sys
from pathlib import Path

from flink_agents.runtime.flink.submission import configure_python_workers, worker_python_paths

# In tests/e2e (so e2e): it starts PyFlink's gateway JVM (no job runs).

REPO_ROOT = Path(__file__).resolve().parents[2]


def _env(**options: str):
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    config = Configuration()
    for key, value in options.items():
        config.set_string(key, value)
    return StreamExecutionEnvironment.get_execution_environment(config)


def _options(env) -> dict:
    from pyflink.util.java_utils import get_j_env_configuration

    config = get_j_env_configuration(env._j_stream_execution_environment)
    keys = ("python.executable", "python.client.executable", "python.pythonpath")
    return {key: config.getString(key, None) for key in keys}


def test_worker_paths_are_the_project_root_then_site_packages():
    paths = worker_python_paths()
    assert paths[0] == str(REPO_ROOT)
    assert [p for p in site.getsitepackages() if os.path.isdir(p)] == paths[1:]


def test_unset_options_become_this_interpreter_and_its_paths():
    env = _env(**{"python.execution-mode": "thread"})
    configure_python_workers(env)
    options = _options(env)
    assert options["python.executable"] == os.path.abspath(sys.executable)
    assert options["python.client.executable"] == os.path.abspath(sys.executable)
    assert options["python.pythonpath"].split(os.pathsep) == worker_python_paths()


def test_entries_already_on_the_path_stay_first_and_nothing_doubles():
    env = _env(**{"python.executable": sys.executable, "python.pythonpath": f"/opt/deps{os.pathsep}{REPO_ROOT}"})
    configure_python_workers(env)
    configure_python_workers(env)  # a second agent in the same job
    path = _options(env)["python.pythonpath"].split(os.pathsep)
    assert path == ["/opt/deps", *worker_python_paths()]


def test_another_interpreter_is_left_alone_with_a_warning_in_thread_mode(caplog):
    env = _env(**{"python.executable": "/usr/bin/python3", "python.execution-mode": "thread"})
    with caplog.at_level(logging.WARNING, logger="flink_agents.runtime.flink.submission"):
        configure_python_workers(env)
    assert _options(env) == {"python.executable": "/usr/bin/python3", "python.client.executable": None,
                             "python.pythonpath": None}
    assert "set python.pythonpath" in caplog.text
