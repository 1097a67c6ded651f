"""The Flink runner: ``from_datastream(ds, key_selector).apply(agent).to_datastream()``."""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any, Callable, Dict

from pyflink.common import Types
from pyflink.datastream import DataStream, KeyedStream, StreamExecutionEnvironment

from flink_agents.api.agents.agent import Agent
from flink_agents.api.execution_environment import AgentBuilder, AgentsExecutionEnvironment
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import RETENTION_OPTION
from flink_agents.runtime.flink.failures import job_failures
from flink_agents.runtime.flink.operator import (
    ERROR_OUTPUT,
    INPUT_TAG,
    PROGRESS_OUTPUT,
    STEERING_TAG,
    AgentOperatorFunction,
)
from flink_agents.runtime.features.steering import STEERING_OPTION
from flink_agents.runtime.features.progress import PROGRESS_OPTION
from flink_agents.stores.factory import DEFAULT_SQLITE_PATH

__all__ = ["FlinkExecutionEnvironment", "JOB_ID_OPTION"]

JOB_ID_OPTION = "job_id"

log = logging.getLogger(__name__)


class FlinkAgentBuilder(AgentBuilder):
    def __init__(
        self, env: "FlinkExecutionEnvironment", keyed: KeyedStream,
        unkeyed: DataStream | None = None, key_selector: Any = None, key_type: Any = None,
    ) -> None:
        self._env = env
        self._keyed = keyed
        self._unkeyed = unkeyed  # kept to union a steering input with it
        self._key_selector = key_selector
        self._key_type = key_type
        self._steering: tuple[DataStream, Any] | None = None
        self._plan: AgentPlan | None = None
        self._agent_name = "agent"
        self._outputs: DataStream | None = None
        self._progress = False

    def apply(self, agent: Agent) -> AgentBuilder:
        if self._plan is not None:
            raise RuntimeError("apply() was already called on this input")
        self._plan = AgentPlan.from_agent(agent)
        self._agent_name = type(agent).__name__
        return self

    def with_steering(self, steering: DataStream, key_selector: Callable[[Any], Any] | Any) -> "FlinkAgentBuilder":
        """A second input of steering messages, keyed like the main one
        (``runtime.features.steering``): they reach the key's running turn before its
        next model call, in order, journaled; at most 32 wait per key (one
        more goes to ``error_stream()`` as an error record).

        Raises:
            RuntimeError: After ``to_datastream``, or the main input was given
                as a ``KeyedStream`` (its key selector is needed here).
        """
        if self._outputs is not None:
            raise RuntimeError("call with_steering() before to_datastream()")
        if self._unkeyed is None:
            raise RuntimeError(
                "with_steering needs the main input unkeyed with its key_selector: "
                "from_datastream(ds, key_selector), not a KeyedStream"
            )
        self._steering = (steering, key_selector)
        return self

    def _keyed_input(self) -> KeyedStream:
        """The main input, unioned with the steering input if there is one
        (both tagged, keyed by their own selectors)."""
        if self._steering is None:
            return self._keyed
        steering, steering_selector = self._steering
        select_main, select_steering = _key_function(self._key_selector), _key_function(steering_selector)
        main = _tagged(self._unkeyed, INPUT_TAG).uid(f"flink-agents:{self._agent_name}:input")
        steer = _tagged(steering, STEERING_TAG).uid(f"flink-agents:{self._agent_name}:steering")
        return main.union(steer).key_by(
            lambda t: select_main(t[1]) if t[0] == INPUT_TAG else select_steering(t[1]), key_type=self._key_type
        )

    def to_datastream(self, output_type: Any = None, progress: bool = False) -> DataStream:
        """The agent's outputs (``OutputEvent.output``), in order per key.

        Args:
            output_type: Flink type information of the outputs; default pickled
                Python objects.
            progress: Also publish the progress stream (``progress_stream()``;
                same as the option ``progress.enabled``).

        Raises:
            RuntimeError: ``apply`` was not called.
        """
        if self._plan is None:
            raise RuntimeError("call apply(agent) before to_datastream()")
        config: Dict[str, Any] = dict(self._env.get_config())
        config.setdefault(RETENTION_OPTION, self._env.default_retention_s())
        if config.get("journal.store") == "sqlite":
            # Resolved here: Python workers run in another working directory.
            path = config.get("journal.sqlite.path") or DEFAULT_SQLITE_PATH
            config["journal.sqlite.path"] = os.path.abspath(os.fspath(path))
        if progress:
            config[PROGRESS_OPTION] = True
        if self._steering is not None:
            config[STEERING_OPTION] = True
        self._progress = bool(config.get(PROGRESS_OPTION))
        job_id = str(config.get(JOB_ID_OPTION) or self._env.job_id)
        _single_element_bundles(self._env.env)
        function = AgentOperatorFunction(self._plan, config, job_id)
        self._outputs = (
            self._keyed_input().process(function, output_type=output_type or Types.PICKLED_BYTE_ARRAY())
            .name(f"agent:{self._agent_name}")
            .uid(f"flink-agents:{self._agent_name}")
        )
        return self._outputs

    def error_stream(self) -> DataStream:
        """Error records of records skipped under the ``skip`` strategy:
        ``{"key", "seq", "record", "action", "error_type", "error_message",
        "attempts"}``.

        Raises:
            RuntimeError: ``to_datastream`` was not called.
        """
        if self._outputs is None:
            raise RuntimeError("call to_datastream() before error_stream()")
        return self._outputs.get_side_output(ERROR_OUTPUT)


    def progress_stream(self) -> DataStream:
        """The runs' progress records (``flink_agents.runtime.features.progress``): one
        per committed fact of a run, each emitted after its journal write
        landed, in commit order per key.

        Raises:
            RuntimeError: ``to_datastream(progress=True)`` (or the option
                ``progress.enabled``) was not used.
        """
        if self._outputs is None or not self._progress:
            raise RuntimeError(
                "the progress stream is opt-in: call to_datastream(progress=True) "
                "(or set progress.enabled) before progress_stream()"
            )
        return self._outputs.get_side_output(PROGRESS_OUTPUT)


def _tagged(stream: DataStream, tag: str) -> DataStream:
    """``stream`` as ``(tag, value)``, at the stream's own parallelism: a map
    at another parallelism would rebalance, and records of one key would
    then reach the agent out of order."""
    parallelism = stream._j_data_stream.getParallelism()
    return stream.map(lambda v: (tag, v), output_type=Types.PICKLED_BYTE_ARRAY()).set_parallelism(parallelism)


def _key_function(selector: Any) -> Callable[[Any], Any]:
    """A key selector (function or ``KeySelector``) as a function."""
    get_key = getattr(selector, "get_key", None)
    return get_key if callable(get_key) else selector


BUNDLE_SIZE_OPTION = "python.fn-execution.bundle.size"


def _single_element_bundles(env: StreamExecutionEnvironment) -> None:
    """Run the job's Python functions in bundles of one element, unless the
    job sets a bundle size.

    PyFlink applies the timers a Python function registers asynchronously,
    and a checkpoint does not wait for those of the bundle it flushes: the
    checkpoint misses them, and a job restored from it never fires them. The
    agent operator registers its polling timer in nearly every callback, and
    that timer is what resubmits a restored key's pending records. With
    bundles of one element, a registration made in ``process_element`` is
    applied before the next barrier; one made in ``on_timer`` can still miss
    a barrier already waiting (flink-python applies queued registrations only
    when the watermark advances, not before a snapshot), so the operator also
    keeps a second polling timer ahead (``AgentOperatorFunction._schedule``).
    """
    from pyflink.util.java_utils import get_j_env_configuration

    config = get_j_env_configuration(env._j_stream_execution_environment)
    if config.getString("python.execution-mode", "process") == "thread":
        return  # embedded Python registers timers synchronously: no bundles
    if not config.containsKey(BUNDLE_SIZE_OPTION):
        config.setString(BUNDLE_SIZE_OPTION, "1")
    elif config.getString(BUNDLE_SIZE_OPTION, "1") != "1":
        log.warning(
            "%s is %s: timers registered in the bundle a checkpoint flushes are not in that "
            "checkpoint, so records pending at a restore may wait for the key's next input",
            BUNDLE_SIZE_OPTION, config.getString(BUNDLE_SIZE_OPTION, "1"),
        )


def prepare_thread_mode() -> None:
    """Let ``python.execution-mode: thread`` find this interpreter's packages.

    In thread mode PyFlink embeds CPython in the JVM (pemja); that interpreter
    does not see a virtual environment's site-packages ("No module named
    pemja"), only ``PYTHONPATH``. Call before the first PyFlink environment
    is created in the process (the JVM inherits the environment then).
    """
    import site
    import sys

    import flink_agents

    # The embedded interpreter reads no .pth files, so an editable install's
    # import hook does not work there: name the package's own root too.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(flink_agents.__file__)))
    paths = [p for p in (package_root, *site.getsitepackages(), *sys.path) if p and os.path.isdir(p)]
    current = os.environ.get("PYTHONPATH", "")
    merged = [p for p in current.split(os.pathsep) if p] + [p for p in paths if p not in current.split(os.pathsep)]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(merged))


class FlinkExecutionEnvironment(AgentsExecutionEnvironment):
    """Builds agent operators into a PyFlink job on ``env``.

    Args:
        env: The job's ``StreamExecutionEnvironment``.
        t_env: A ``StreamTableEnvironment`` (for tables; not used yet).
        **config: Agent configuration (also settable via ``get_config()``).
    """

    def __init__(self, env: StreamExecutionEnvironment, t_env: Any = None, **config: Any) -> None:
        super().__init__()
        self.env = env
        self.t_env = t_env
        self._config.update(config)
        self._config.setdefault("journal.store", "sqlite")
        # Stable across restarts of the same job only if the user sets job_id.
        self.job_id = str(config.get(JOB_ID_OPTION) or uuid.uuid4().hex[:12])

    def from_datastream(self, input: DataStream, key_selector: Callable[[Any], Any] | Any = None, key_type: Any = None) -> AgentBuilder:
        """Key ``input`` by ``key_selector`` (a function or ``KeySelector``);
        an already keyed stream may omit it.

        Raises:
            ValueError: No key selector for an unkeyed stream.
        """
        if isinstance(input, KeyedStream) and key_selector is None:
            return FlinkAgentBuilder(self, input)
        if key_selector is None:
            raise ValueError("from_datastream needs a key_selector (or a KeyedStream)")
        return FlinkAgentBuilder(self, input.key_by(key_selector, key_type=key_type), input, key_selector, key_type)

    def default_retention_s(self) -> float:
        """How long journal entries of finished runs are kept by default.

        An entry is needed only while a failover can restore a checkpoint
        taken before its run finished. The checkpoint that follows a run
        starts within one interval and completes within the checkpoint
        timeout, so twice (interval + timeout) covers one failed checkpoint
        too; never less than 10 minutes. See docs/durability.md.
        """
        checkpoints = self.env.get_checkpoint_config()
        interval_ms = max(checkpoints.get_checkpoint_interval(), 0)
        timeout_ms = max(checkpoints.get_checkpoint_timeout(), 0)
        return max(600.0, 2 * (interval_ms + timeout_ms) / 1000.0)

    def execute(self, job_name: str | None = None) -> Any:
        """Run the job (blocks until a bounded input is done).

        Raises:
            FlinkJobFailed: The job failed; its message names the root
                Python cause (``job_failures``).
        """
        with job_failures():
            return self.env.execute(job_name or "flink-agents job")
