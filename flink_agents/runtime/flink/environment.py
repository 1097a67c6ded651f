"""The Flink runner: ``from_datastream(ds, key_selector).apply(agent).to_datastream()``."""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any, Callable, Dict

from pyflink.common import Types
from pyflink.common.typeinfo import PickledBytesTypeInfo
from pyflink.datastream import DataStream, KeySelector, KeyedStream, StreamExecutionEnvironment

from flink_agents.api.agents.agent import Agent
from flink_agents.api.core_options import AgentConfigOptions, RuntimeOptions, validate_options
from flink_agents.api.execution_environment import AgentBuilder, AgentsExecutionEnvironment
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.flink.beam_logging import install_beam_gcs_warning_filter
from flink_agents.runtime.flink.failures import job_failures
from flink_agents.runtime.flink.journal_placement import check_journal_placement, execution_target
from flink_agents.runtime.flink.loopback import bind_mini_cluster_to_loopback
from flink_agents.runtime.flink.metric_reporters import configure_metric_reporters
from flink_agents.runtime.flink.submission import AgentOutputStream, configure_python_workers, set_input_uid
from flink_agents.runtime.flink.table import ConvertingOperatorFunction, OutputConverter, table_to_datastream
from flink_agents.runtime.flink.operator import (
    ERROR_OUTPUT,
    INPUT_TAG,
    PROGRESS_OUTPUT,
    STEERING_TAG,
    AgentOperatorFunction,
)
from flink_agents.stores.factory import DEFAULT_SQLITE_PATH

__all__ = ["FlinkExecutionEnvironment"]

log = logging.getLogger(__name__)


# Beam is imported while a job runs; its GCS warning would land in progress output.
install_beam_gcs_warning_filter()


class FlinkAgentBuilder(AgentBuilder):
    def __init__(
        self, env: "FlinkExecutionEnvironment", keyed: KeyedStream | None,
        unkeyed: DataStream | None = None, key_selector: Any = None, key_type: Any = None,
    ) -> None:
        self._env = env
        # None: keyed in to_datastream, after a steering input may have been
        # added (a key_by made here would stay in the graph unused).
        self._keyed = keyed
        self._unkeyed = unkeyed  # kept to union a steering input with it
        self._key_selector = key_selector
        self._key_type = key_type
        self._steering: tuple[DataStream, Any] | None = None
        self._plan: AgentPlan | None = None
        self._agent_name = "agent"
        self._outputs: DataStream | None = None
        self._side_outputs: Dict[str, DataStream] = {}
        self._progress = False

    def apply(self, agent: Agent | str) -> AgentBuilder:
        if self._plan is not None:
            raise RuntimeError("apply() was already called on this input")
        self._plan = AgentPlan.from_agent(self._env._agent_to_apply(agent))
        self._agent_name = agent if isinstance(agent, str) else type(agent).__name__
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
        (both tagged, keyed by their own selectors). The operator computing
        the keys gets the uid ``flink-agents:<agent>:key``."""
        if self._steering is None:
            keyed = self._keyed
            if keyed is None:
                keyed = self._unkeyed.key_by(self._key_selector, key_type=self._key_type)
            set_input_uid(keyed, f"flink-agents:{self._agent_name}:key")
            return keyed
        steering, steering_selector = self._steering
        select_main, select_steering = _key_function(self._key_selector), _key_function(steering_selector)
        main = _tagged(self._unkeyed, INPUT_TAG).uid(f"flink-agents:{self._agent_name}:input")
        steer = _tagged(steering, STEERING_TAG).uid(f"flink-agents:{self._agent_name}:steering")
        keyed = main.union(steer).key_by(
            lambda t: select_main(t[1]) if t[0] == INPUT_TAG else select_steering(t[1]), key_type=self._key_type
        )
        set_input_uid(keyed, f"flink-agents:{self._agent_name}:key")
        return keyed

    def to_datastream(self, output_type: Any = None, progress: bool = False, typed_outputs: bool = False) -> DataStream:
        """The agent's outputs (``OutputEvent.output``), in order per key.

        By default each output arrives as JSON-like data, as Flink Agents
        0.3.1 hands it downstream: a pydantic model or dataclass as a dict,
        a tuple or set as a list, a datetime, UUID or Decimal as a string, a
        ``Row`` as a ``Row`` (``runtime.flink.output_shape``). An output
        JSON cannot carry fails the job with ``OutputShapeError`` naming the
        key. ``typed_outputs=True`` hands the objects as the actions built
        them (this project's extension).

        Every operator made here has a stable uid (``flink-agents:<agent>``
        and ``:key``, ``:input``, ``:steering``, ``:errors``,
        ``:progress``): a savepoint restores into the same job rebuilt, at
        any parallelism. The sink of the returned stream's
        ``execute_and_collect`` gets ``flink-agents:<agent>:collect:<new
        hex>``, new per submission: Flink's collect sink cannot resume from
        saved state, so a job meant to be resumed writes to a real sink.
        The job's Python workers are set to this interpreter and its paths
        (``runtime.flink.submission.configure_python_workers``), so the job
        also runs when submitted to a cluster with ``flink run``. Metric
        reporters configured for the job (or in ``$FLINK_CONF_DIR``) run on
        the mini-cluster too (``runtime.flink.metric_reporters``).

        Args:
            output_type: Flink type information of the outputs; default pickled
                Python objects. Given, each output is converted to it first
                (``runtime.flink.output_conversion``: a dict, pydantic
                model or ``Row`` to a ``Types.ROW_NAMED`` row, say), and one
                that does not fit fails the job with ``OutputTypeError``
                naming the key, the field and the value.
            progress: Also publish the progress stream (``progress_stream()``;
                same as the option ``progress.enabled``).
            typed_outputs: Hand downstream the output objects themselves
                (pickled), not their JSON-like form. With an ``output_type``
                other than ``PICKLED_BYTE_ARRAY`` the typed objects are
                always what is converted to it.

        Raises:
            RuntimeError: ``apply`` was not called.
        """
        if self._plan is None:
            raise RuntimeError("call apply(agent) before to_datastream()")
        # Code over config.yaml, flattened for the workers; every declared
        # option checked here, so a bad value fails before the job starts.
        config: Dict[str, Any] = dict(self._env.get_config())
        config.setdefault(RuntimeOptions.JOURNAL_RETENTION_S.key, self._env.default_retention_s())
        options = validate_options(config)
        # Before the path is made absolute: a relative one is refused on a cluster.
        check_journal_placement(options, execution_target(self._env.env))
        if (options.get(RuntimeOptions.JOURNAL_STORE) or "sqlite").strip().lower() == "sqlite":
            # Resolved here: Python workers run in another working directory.
            path = options.get(RuntimeOptions.JOURNAL_SQLITE_PATH) or DEFAULT_SQLITE_PATH
            config[RuntimeOptions.JOURNAL_SQLITE_PATH.key] = os.path.abspath(os.fspath(path))
        if progress:
            config[RuntimeOptions.PROGRESS_ENABLED.key] = True
        if self._steering is not None:
            config[RuntimeOptions.STEERING_ENABLED.key] = True
        self._progress = bool(progress or options.get(RuntimeOptions.PROGRESS_ENABLED))
        job_id = options.get(AgentConfigOptions.JOB_IDENTIFIER) or self._env.job_id
        _single_element_bundles(self._env.env)
        configure_python_workers(self._env.env)
        bind_mini_cluster_to_loopback(self._env.env)  # a job of its own: no server on other interfaces
        configure_metric_reporters(self._env.env._j_stream_execution_environment)
        if output_type is None or isinstance(output_type, PickledBytesTypeInfo):
            function = AgentOperatorFunction(self._plan, config, job_id, typed_outputs=typed_outputs)
        else:  # each output converted to the type, misfits named (runtime.flink.table)
            function = ConvertingOperatorFunction(self._plan, config, job_id, OutputConverter(output_type))
        processed = (
            self._keyed_input().process(function, output_type=output_type or Types.PICKLED_BYTE_ARRAY())
            .name(f"agent:{self._agent_name}")
            .uid(f"flink-agents:{self._agent_name}")
        )
        self._outputs = AgentOutputStream(processed, f"flink-agents:{self._agent_name}:collect")
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
        return self._side_output(ERROR_OUTPUT, "errors")

    def _side_output(self, tag: Any, name: str) -> DataStream:
        """The side output ``tag`` (PyFlink maps it to a stream of its own
        with an identity map), made once, with the uid
        ``flink-agents:<agent>:<name>``.

        The map is not chained: PyFlink's Python chaining would merge it
        with the user's next Python function into a new operator carrying
        this uid while a union made before still reads the old pair, so the
        uid would be in the graph twice (and the pair would run twice)."""
        if name not in self._side_outputs:
            self._side_outputs[name] = (
                self._outputs.get_side_output(tag).name(f"agent:{self._agent_name}:{name}")
                .uid(f"flink-agents:{self._agent_name}:{name}").disable_chaining()
            )
        return self._side_outputs[name]

    def to_table(self, schema: Any, output_type: Any) -> Any:
        """The agent's outputs as a ``pyflink.table.Table``, as Flink Agents
        0.3.1 offers it: ``to_datastream(output_type)`` handed to
        ``StreamTableEnvironment.from_data_stream(stream, schema)`` of the
        environment's table environment (``t_env``).

        Args:
            schema: A ``pyflink.table.Schema`` whose columns match the
                fields of ``output_type`` (or None: the columns are
                ``output_type``'s fields).
            output_type: The outputs' type, usually
                ``Types.ROW_NAMED(names, types)`` (also ``RowTypeInfo``,
                plain or inside ``ExternalTypeInfo``); its field names are
                the columns. Each output is converted to it: a ``Row``, a
                dict, a pydantic model or a dataclass by field name, a
                tuple by position.

        Raises:
            RuntimeError: ``apply`` was not called.
            TypeError: ``output_type`` is not a ``TypeInformation``, or
                ``schema`` is not a ``Schema``.
            OutputTypeError: (when the job runs) an output does not fit
                ``output_type``; names the key, the field and the value.
        """
        from pyflink.common.typeinfo import TypeInformation
        from pyflink.table import Schema

        if self._plan is None:
            raise RuntimeError("call apply(agent) before to_table()")
        if not isinstance(output_type, TypeInformation):
            raise TypeError(
                "to_table: output_type must be a pyflink TypeInformation such as "
                f"Types.ROW_NAMED(['id', 'result'], [Types.LONG(), Types.STRING()]), not {type(output_type).__name__}"
            )
        if schema is not None and not isinstance(schema, Schema):
            raise TypeError(f"to_table: schema must be a pyflink.table.Schema or None, not {type(schema).__name__}")
        stream = self.to_datastream(output_type)
        t_env = self._env.t_env
        return t_env.from_data_stream(stream) if schema is None else t_env.from_data_stream(stream, schema)

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
        return self._side_output(PROGRESS_OUTPUT, "progress")


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

    flink-python 2.3 (process mode) receives a bundle's timer registrations
    when the bundle finishes, but applies each as a mailbox mail
    ("PythonTimerRegistration", ``BeamPythonFunctionRunner``): the flush a
    checkpoint barrier triggers (``prepareSnapshotPreBarrier`` ->
    ``invokeFinishBundle``) receives them and the snapshot is taken before
    they run (only ``advanceWatermark`` calls ``drainUnregisteredTimers``
    first). The snapshot holds the keyed state the bundle wrote, not its
    timers, and a job restored from it never fires them. The agent operator
    registers its polling timer in nearly every callback, and that timer is
    what resubmits a restored key's pending records
    (``tools/bench/bundle_timer_restores.py``: with bundles of 1000, each
    restore lost the keys whose first record came in the bundle its
    checkpoint cut). With bundles of one element, a registration made in
    ``process_element`` is applied before the next input, the barrier
    included; one made in ``on_timer`` (itself a mail) can still miss a
    barrier already waiting, so the operator also keeps a second polling
    timer ahead (``KeyedHost._schedule``). docs/performance.md, "Execution
    mode and bundles".
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
        t_env: The ``StreamTableEnvironment`` of ``from_table``/``to_table``;
            None: one is created from ``env`` when first needed.
        **config: Agent configuration (also settable via ``get_config()``).
    """

    def __init__(self, env: StreamExecutionEnvironment, t_env: Any = None, **config: Any) -> None:
        super().__init__()
        self.env = env
        self._t_env = t_env  # created from env when first needed (the t_env property)
        self._config.update(config)
        self._config.setdefault(RuntimeOptions.JOURNAL_STORE.key, "sqlite")
        # Stable across restarts of the same job only if the user sets
        # job-identifier (or job_id); to_datastream() reads it again.
        self.job_id = self._config.get(AgentConfigOptions.JOB_IDENTIFIER) or uuid.uuid4().hex[:12]

    def from_datastream(self, input: DataStream, key_selector: Callable[[Any], Any] | Any = None, key_type: Any = None) -> AgentBuilder:
        """Key ``input`` by ``key_selector`` (a function or ``KeySelector``);
        an already keyed stream may omit it.

        Raises:
            ValueError: No key selector for an unkeyed stream.
            TypeError: The key selector is neither a ``KeySelector`` nor callable.
        """
        if isinstance(input, KeyedStream) and key_selector is None:
            return FlinkAgentBuilder(self, input)
        if key_selector is None:
            raise ValueError("from_datastream needs a key_selector (or a KeyedStream)")
        if not isinstance(key_selector, KeySelector) and not callable(key_selector):
            raise TypeError("Parameter key_selector should be type of KeySelector or a callable function.")
        return FlinkAgentBuilder(self, None, input, key_selector, key_type)

    @property
    def t_env(self) -> Any:
        """The ``StreamTableEnvironment`` of ``from_table``/``to_table``: the
        one given, else one created from ``env`` (once, on first use), as
        Flink Agents 0.3.1 does."""
        if self._t_env is None:
            from pyflink.table import StreamTableEnvironment

            self._t_env = StreamTableEnvironment.create(stream_execution_environment=self.env)
        return self._t_env

    def from_table(self, input: Any, key_selector: Callable[[Any], Any] | Any = None, key_type: Any = None) -> AgentBuilder:
        """Run an agent over the rows of a ``Table``, as Flink Agents 0.3.1
        does: each row reaches the agent as a ``pyflink.common.Row``
        (``InputEvent.input``; fields by name, ``row["id"]`` or ``row.id``).

        Args:
            input: A ``pyflink.table.Table`` of this environment's ``t_env``,
                insert-only (``runtime.flink.table.table_to_datastream``).
            key_selector: The key of a row: a ``KeySelector`` or a function
                of the ``Row``.
            key_type: The keys' Flink type (default: pickled).

        Raises:
            TypeError: ``input`` is not a ``Table``.
            ValueError: No ``key_selector``.
            pyflink.util.exceptions.TableException: The table produces
                updates (a non-windowed aggregate, say); an agent takes
                insert-only rows.
        """
        from pyflink.table import Table

        if not isinstance(input, Table):
            raise TypeError(f"from_table: input must be a pyflink.table.Table, not {type(input).__name__}")
        if key_selector is None:
            raise ValueError("from_table needs a key_selector: a KeySelector or a function of the row")
        return self.from_datastream(table_to_datastream(self.t_env, input), key_selector, key_type)

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
        # Again here: the reporter jar goes to the calling thread's class loader.
        configure_metric_reporters(self.env._j_stream_execution_environment)
        with job_failures():
            return self.env.execute(job_name or "flink-agents job")
