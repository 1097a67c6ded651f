"""What a job needs to run on a Flink cluster as well as on the mini-cluster:
the Python its workers run, and stable operator uids.

Workers: on a cluster, Python functions run in the TaskManagers, which see
neither the client's environment variables nor its virtual environment.
``configure_python_workers`` writes the interpreter and its paths into the
job's own configuration (``python.executable``, ``python.client.executable``,
``python.pythonpath``), so ``flink run -py``/``-pym`` works in both
execution modes: in ``thread`` mode the TaskManager embeds CPython (pemja),
which reads no ``.pth`` files and finds the venv's packages (pemja, pyflink,
this project) only through ``python.pythonpath``; in ``process`` mode the
workers start ``python.executable``. The paths are the submitting
interpreter's, so they hold where TaskManagers share the client's file
system (a local standalone cluster, an image built with the same venv);
elsewhere set the three options in the cluster's ``config.yaml`` to the
workers' own interpreter: a ``python.executable`` other than this
interpreter is left alone, with all three options.

Uids: Flink matches savepoint state to operators by uid; an operator
without one gets a hash of its place in the graph (or, for
``execute_and_collect``'s sink, a name with a JVM-wide counter), so a
changed or rebuilt graph no longer claims its state. ``execute_and_collect``
here is PyFlink's with an explicit uid given to the collect sink, new per
submission: Flink's collect sink cannot resume from saved state
(``AgentOutputStream.execute_and_collect``).
"""

from __future__ import annotations

import logging
import os
import uuid
import site
import sys
from typing import Any, List

from pyflink.datastream import DataStream, StreamExecutionEnvironment

from flink_agents.runtime.flink.compat import collect_result_iterator
from flink_agents.runtime.flink.metric_reporters import configure_metric_reporters

__all__ = [
    "AgentOutputStream",
    "PYTHON_CLIENT_EXECUTABLE",
    "PYTHON_EXECUTABLE",
    "PYTHON_PATH",
    "add_collect_sink",
    "configure_python_workers",
    "execute_and_collect",
    "set_input_uid",
    "worker_python_paths",
]

log = logging.getLogger(__name__)

PYTHON_EXECUTABLE = "python.executable"
PYTHON_CLIENT_EXECUTABLE = "python.client.executable"
PYTHON_PATH = "python.pythonpath"
EXECUTION_MODE = "python.execution-mode"


def worker_python_paths() -> List[str]:
    """The directories a worker's interpreter needs on ``sys.path``: this
    project's root (the directory holding ``flink_agents``; an editable
    install's ``.pth`` hook does not run in an embedded interpreter) and this
    interpreter's site-packages, in that order, existing ones only."""
    import flink_agents

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(flink_agents.__file__)))
    paths = [package_root, *site.getsitepackages()]
    return [p for p in dict.fromkeys(paths) if os.path.isdir(p)]


def _j_configuration(env: StreamExecutionEnvironment) -> Any:
    from pyflink.util.java_utils import get_j_env_configuration

    return get_j_env_configuration(env._j_stream_execution_environment)


def configure_python_workers(env: StreamExecutionEnvironment) -> None:
    """Set the job's ``python.executable``, ``python.client.executable`` and
    ``python.pythonpath`` for its workers, unless the job or the cluster
    chose another interpreter.

    ``python.executable`` and ``python.client.executable`` become this
    interpreter where they are unset; ``python.pythonpath`` gets
    ``worker_python_paths()`` after any entries it has. If
    ``python.executable`` names another interpreter (the cluster's
    ``config.yaml``, say), nothing is changed: that interpreter's packages
    are the cluster's business, and in thread mode without
    ``python.pythonpath`` a warning names the option.

    Args:
        env: The job's environment, before its graph is built (the options
            are read when ``execute`` generates it).
    """
    config = _j_configuration(env)
    interpreter = os.path.abspath(sys.executable)
    chosen = config.getString(PYTHON_EXECUTABLE, None)
    if chosen and os.path.abspath(chosen) != interpreter:
        if config.getString(EXECUTION_MODE, "process") == "thread" and not config.containsKey(PYTHON_PATH):
            log.warning(
                "python.executable is %s, not this interpreter (%s): in thread mode its embedded "
                "interpreter must find pemja, pyflink and flink_agents; if it does not (a virtual "
                "environment), set python.pythonpath to its site-packages",
                chosen, interpreter,
            )
        return
    if not chosen:
        config.setString(PYTHON_EXECUTABLE, interpreter)
    if not config.containsKey(PYTHON_CLIENT_EXECUTABLE):
        config.setString(PYTHON_CLIENT_EXECUTABLE, interpreter)
    current = [p for p in (config.getString(PYTHON_PATH, "") or "").split(os.pathsep) if p]
    merged = list(dict.fromkeys(current + worker_python_paths()))
    config.setString(PYTHON_PATH, os.pathsep.join(merged))


def set_input_uid(stream: Any, uid: str) -> None:
    """Give the operator that computes a ``KeyedStream``'s keys (PyFlink's
    ``_stream_key_by_map_operator``, a Python function before the hash
    partitioning) the uid ``uid``, unless it has one. On its own it is an
    operator of the graph; chained into the Python operator before it, it
    takes that one's uid."""
    partition = stream._j_data_stream.getTransformation()
    inputs = partition.getInputs()
    if inputs.size() != 1:
        return
    key_map = inputs.get(0)
    if key_map.getUid() is None and key_map.getUserProvidedNodeHash() is None:
        key_map.setUid(uid)


def add_collect_sink(stream: DataStream, uid: str) -> Any:
    """Add Flink's collect sink after ``stream``, with the uid ``uid``; the
    job is not started (``execute_and_collect`` does both).

    Java's ``DataStream.collectAsync`` with our uid: the sink and the
    iterator are made here because the iterator finds the sink's operator
    coordinator by the uid it is given (changing the sink's uid afterwards
    leaves the iterator asking for the old one: results would then come only
    when the job ends). On Flink 1.20 the iterator finds it through the sink
    operator's id instead (``compat.collect_result_iterator``).

    Returns:
        The Java ``CollectResultIterator``; the environment's next
        ``executeAsync`` hands it the job client.
    """
    import uuid

    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    collect = jvm.org.apache.flink.streaming.api.operators.collect
    j_env = stream._j_data_stream.getExecutionEnvironment()
    jvm.org.apache.flink.python.util.PythonConfigUtil.configPythonOperator(j_env)
    stream._apply_chaining_optimization()  # as PyFlink's execute_and_collect does
    j_stream = stream._j_data_stream
    serializer = j_stream.getType().createSerializer(j_env.getConfig().getSerializerConfig())
    accumulator = f"dataStreamCollect_{uuid.uuid4()}"
    config = j_env.getConfiguration()
    factory = collect.CollectSinkOperatorFactory(
        serializer, accumulator, config.get(collect.CollectSinkOperatorFactory.MAX_BATCH_SIZE),
        config.get(collect.CollectSinkOperatorFactory.SOCKET_TIMEOUT),
    )
    sink = collect.CollectStreamSink(j_stream, factory)
    sink.name("Data stream collect sink")
    sink.uid(uid)
    fetch_timeout_ms = config.get(jvm.org.apache.flink.configuration.RpcOptions.ASK_TIMEOUT_DURATION).toMillis()
    j_iterator = collect_result_iterator(
        jvm, factory, uid, serializer, accumulator, j_env.getCheckpointConfig(), fetch_timeout_ms,
    )
    j_env.addOperator(sink.getTransformation())
    j_env.registerCollectIterator(j_iterator)
    return j_iterator


def execute_and_collect(stream: DataStream, job_name: str, uid: str) -> Any:
    """PyFlink's ``DataStream.execute_and_collect(job_name)``, with ``uid`` on
    the collect sink (Flink names it with a counter of the client JVM, so a
    resubmitted or changed job would not claim its state in a savepoint).

    Returns:
        A ``CloseableIterator`` of the stream's records (close it, or use it
        in ``with``).
    """
    from pyflink.datastream.data_stream import CloseableIterator

    j_iterator = add_collect_sink(stream, uid)
    # On the submitting thread: the reporter jar goes to its class loader.
    configure_metric_reporters(stream._j_data_stream.getExecutionEnvironment())
    stream._j_data_stream.getExecutionEnvironment().executeAsync(job_name)  # hands the client to the iterator
    return CloseableIterator(j_iterator, stream.get_type())


class AgentOutputStream(DataStream):
    """The agent's output stream: a ``DataStream`` whose
    ``execute_and_collect`` gives the collect sink an explicit uid (see there)."""

    def __init__(self, stream: DataStream, collect_uid: str) -> None:
        super().__init__(stream._j_data_stream)
        self._collect_uid = collect_uid

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None) -> Any:
        """As ``DataStream.execute_and_collect``; the collect sink's uid is
        ``flink-agents:<agent>:collect:<12 hex digits new per call>`` (with
        ``limit``, PyFlink's own sink).

        New per call on purpose: Flink's collect sink cannot resume from a
        checkpoint or savepoint (it restores an offset that the new client's
        iterator does not know: "userVisibleTail should not be larger than
        offset"), so its state must stay unclaimed; restoring a job that
        collects needs ``execution.state-recovery.ignore-unclaimed-state``.
        A job meant to be resumed writes to a real sink (docs/deploy.md).
        """
        if limit is not None:
            return super().execute_and_collect(job_execution_name, limit)
        uid = f"{self._collect_uid}:{uuid.uuid4().hex[:12]}"
        return execute_and_collect(self, job_execution_name or "DataStream Collect", uid)
