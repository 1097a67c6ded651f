"""The Flink runner: ``from_datastream(ds, key_selector).apply(agent).to_datastream()``."""

from __future__ import annotations

import logging
import os
import re
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from py4j.protocol import Py4JJavaError

from pyflink.common import Types
from pyflink.datastream import DataStream, KeyedStream, StreamExecutionEnvironment

from flink_agents.api.agents.agent import Agent
from flink_agents.api.execution_environment import AgentBuilder, AgentsExecutionEnvironment
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import RETENTION_OPTION
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

__all__ = ["FlinkExecutionEnvironment", "FlinkJobFailed", "JOB_ID_OPTION", "job_failures"]

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


# --- failures of a job, named by their Python cause --------------------------------------

_TRACEBACK = "Traceback (most recent call last):"
# Thread mode (pemja): the Java exception's message is "<class 'mod.Type'>: message".
_PEMJA_MESSAGE = re.compile(r"<class '(?P<type>[\w.]+)'>: ?(?P<message>.*)", re.DOTALL)
_SUMMARY_MAX_CHARS = 2000


class FlinkJobFailed(Py4JJavaError):
    """A Flink job failed; ``str()`` is one line naming the root cause.

    PyFlink reports any failure of a job (an action's ``ActionFailed``, a
    journal store that cannot be reached, a record that fails to decode) as
    a ``Py4JJavaError`` of the client's call (``o141.hasNext``), with the
    Python exception buried in the Java cause chain. This error names it:
    ``"JournalUnavailableError: load_run of run (...) failed: ..."``. A
    ``Py4JJavaError`` still, so ``except Py4JJavaError`` keeps working.

    Attributes:
        cause_type: Qualified name of the root Python exception
            (``"flink_agents.runtime.errors.ActionFailed"``), or of the
            deepest Java exception when no Python exception is in the chain.
        cause_message: Its message, whitespace collapsed to one line.
        java_trace: The client error's full text: the Java stack trace with
            every cause, the Python worker's traceback included. The
            ``Py4JJavaError`` itself is the ``__cause__``.
    """

    def __init__(self, error: Py4JJavaError) -> None:
        super().__init__(error.errmsg, error.java_exception)
        self.java_trace = _full_text(error)
        self.cause_type, self.cause_message = _root_cause(error.java_exception, self.java_trace)

    def __str__(self) -> str:
        short_type = self.cause_type.rsplit(".", 1)[-1]
        return f"{short_type}: {self.cause_message}" if self.cause_message else short_type


@contextmanager
def job_failures() -> Iterator[None]:
    """Turn a failed job's ``Py4JJavaError`` raised in the block into a
    ``FlinkJobFailed`` naming the root Python cause (chained from it).

    Wrap whatever runs or reads a job: ``env.execute()``, or the iteration
    of ``execute_and_collect``::

        with job_failures(), outputs.execute_and_collect("job") as collected:
            for output in collected: ...

    Raises:
        FlinkJobFailed: The block raised a ``Py4JJavaError``.
    """
    try:
        yield
    except FlinkJobFailed:
        raise
    except Py4JJavaError as error:
        raise FlinkJobFailed(error) from error


def _full_text(error: Py4JJavaError) -> str:
    """The error's Java stack trace (with causes), or its own message if the
    gateway can no longer answer (the JVM is gone)."""
    try:
        return Py4JJavaError.__str__(error)
    except Exception as exc:  # noqa: BLE001: the summary must not hide the failure
        return f"{error.errmsg} (Java stack trace unavailable: {type(exc).__name__}: {exc})"


def _java_chain(java_exception: Any) -> List[Tuple[str, str]]:
    """``(class name, message)`` of ``java_exception`` and its causes,
    outermost first; empty if the gateway cannot answer."""
    chain: List[Tuple[str, str]] = []
    seen = set()
    current = java_exception
    try:
        while current is not None and len(chain) < 64:
            ident = current.hashCode()
            if ident in seen:
                break
            seen.add(ident)
            chain.append((str(current.getClass().getName()), str(current.getMessage() or "")))
            current = current.getCause()
    except Exception as exc:  # noqa: BLE001: fall back to the trace text
        log.debug("cannot walk the Java cause chain: %s", exc)
    return chain


def _root_cause(java_exception: Any, java_trace: str) -> Tuple[str, str]:
    """``(type, message)`` of the Python exception the job failed with: the
    deepest one in the Java cause chain, and in a Python traceback its last
    exception (the outermost of a chain: the one naming action, key or
    record); else the deepest Java exception's."""
    chain = _java_chain(java_exception)
    for _, message in reversed(chain):
        found = _python_exception(message)
        if found is not None:
            return found
    found = _python_exception(java_trace)
    if found is not None:
        return found
    if chain:
        name, message = chain[-1]
        return name, _one_line(message)
    return "Py4JJavaError", _one_line(java_trace.splitlines()[0] if java_trace else "")


def _python_exception(text: str) -> Optional[Tuple[str, str]]:
    """The last Python exception in ``text``: a pemja message
    (``<class 'T'>: m``) or a traceback's closing ``T: m`` lines."""
    pemja = _PEMJA_MESSAGE.match(text)
    if pemja:
        return pemja.group("type"), _one_line(pemja.group("message"))
    start = text.rfind(_TRACEBACK)
    if start < 0:
        return None
    lines = text[start + len(_TRACEBACK):].splitlines()
    index = 0
    # Frames ("  File ...") and their source and caret lines are indented.
    while index < len(lines) and (not lines[index] or lines[index].startswith(" ")):
        index += 1
    exception_lines: List[str] = []
    for line in lines[index:]:
        if line.startswith("\tat ") or line.startswith("Caused by:") or re.match(r"\t\.\.\. \d+ more", line):
            break  # the Java stack trace resumes
        exception_lines.append(line)
    if not exception_lines:
        return None
    head, _, message = exception_lines[0].partition(":")
    if not re.fullmatch(r"[\w.]+", head.strip()):
        return None
    return head.strip(), _one_line("\n".join([message, *exception_lines[1:]]))


def _one_line(text: str) -> str:
    """``text`` with its whitespace collapsed, at most ``_SUMMARY_MAX_CHARS``."""
    line = " ".join(text.split())
    return line if len(line) <= _SUMMARY_MAX_CHARS else line[: _SUMMARY_MAX_CHARS - 1] + "…"
