"""The review-analysis job: score product reviews with an agent on Flink.

Each review (``{"id", "review", "ts"}``) is keyed by product id. The agent
asks a chat model for a ``ReviewAnalysis`` (``{"score": 1-5, "reasons":
[...]}``) as structured output (the request's ``output_schema``: the
runtime validates the answer and re-asks the model on a mismatch; the model
calls ``notify_shipping_manager`` first when a review reports shipping
damage) and keeps a per-product running summary (reviews seen, mean score)
in short-term memory. One JSON line per review is written::

    {"id", "ts", "score", "reasons", "reviews_seen", "mean_score"}

Run ``python -m flink_agents.jobs.review_analysis --help``. ``--model`` is one of:

- ``local`` (default): a deterministic offline stand-in;
- ``openai:NAME``: any OpenAI-compatible provider (``--base-url``; key from
  ``OPENAI_API_KEY``);
- ``anthropic:NAME``: Anthropic's Messages API (``--base-url``; key from
  ``ANTHROPIC_API_KEY``);
- ``ollama:NAME``: an Ollama server (``--base-url``, e.g.
  ``http://localhost:11434``; no key);
- ``azure:DEPLOYMENT``: Azure OpenAI (``--base-url`` is the resource's
  endpoint, ``--api-version``, else ``AZURE_OPENAI_ENDPOINT`` and
  ``OPENAI_API_VERSION``; key from ``AZURE_OPENAI_API_KEY``);
- ``tongyi:NAME``: Alibaba DashScope (``--base-url``; key from
  ``DASHSCOPE_API_KEY``).
"""

from __future__ import annotations

import argparse
import os
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

from flink_agents.api.agents.agent import STRUCTURED_OUTPUT, Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.decorators import action, prompt, tool
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.cli.job_help import job_parser
from flink_agents.jobs.review_records import ProductReview, ReviewAnalysis, analysis_output, read_reviews

__all__ = ["ReviewAnalysisAgent", "main", "product_id_of", "run_on_flink", "run_locally"]

log = logging.getLogger("flink_agents.jobs.review_analysis")

SAMPLE_INPUT = Path(__file__).parent / "data" / "sample_reviews.jsonl"
MODEL_SETUP = "review_analysis_model"
MODEL_CONNECTION = "review_model_connection"

REVIEW_PROMPT = Prompt.from_messages([
    ChatMessage(
        role=MessageRole.SYSTEM,
        content=(
            "You analyze product reviews. For the review you are given, answer only with "
            'a JSON object {"score": <integer 1-5, 5 is most satisfied>, "reasons": '
            "[<up to 3 short reasons for the score>]} and nothing else.\n"
            "If the review reports that the product arrived damaged (broken, crushed, "
            "dented, wet from shipping), first call the tool notify_shipping_manager "
            "with the product id and the review text, then answer."
        ),
    )
])


# --model PROVIDER:NAME -> (connection class, setup class, the environment
# variable its connection reads the API key from). Keys are not put in the
# plan: each connection reads its own variable where it runs.
PROVIDERS: Dict[str, tuple[str, str, str | None]] = {
    "openai": (ResourceName.ChatModel.OPENAI_COMPLETIONS_CONNECTION, ResourceName.ChatModel.OPENAI_COMPLETIONS_SETUP,
               "OPENAI_API_KEY"),
    "anthropic": (ResourceName.ChatModel.ANTHROPIC_CONNECTION, ResourceName.ChatModel.ANTHROPIC_SETUP,
                  "ANTHROPIC_API_KEY"),
    "ollama": (ResourceName.ChatModel.OLLAMA_CONNECTION, ResourceName.ChatModel.OLLAMA_SETUP, None),
    "azure": (ResourceName.ChatModel.AZURE_OPENAI_CONNECTION, ResourceName.ChatModel.AZURE_OPENAI_SETUP,
              "AZURE_OPENAI_API_KEY"),
    "tongyi": (ResourceName.ChatModel.TONGYI_CONNECTION, ResourceName.ChatModel.TONGYI_SETUP, "DASHSCOPE_API_KEY"),
}
MODEL_FORMS = "'local', " + ", ".join(f"'{p}:{'DEPLOYMENT' if p == 'azure' else 'NAME'}'" for p in PROVIDERS)


def connection_arguments(
    provider: str, base_url: str | None, api_version: str | None, timeout_s: float, max_retries: int
) -> Dict[str, Any]:
    """The connection's constructor arguments, in each provider connection's
    own field names (those of Flink Agents 0.3.1's connections)."""
    if provider == "azure":
        # As the connection itself: the flags, else Azure's environment variables.
        base_url = base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
        api_version = api_version or os.environ.get("OPENAI_API_VERSION")
        if not base_url or not api_version:
            raise ValueError(
                "--model azure:DEPLOYMENT needs --base-url (the Azure OpenAI endpoint; or AZURE_OPENAI_ENDPOINT) "
                "and --api-version (or OPENAI_API_VERSION)"
            )
        arguments: Dict[str, Any] = {
            "azure_endpoint": base_url, "api_version": api_version, "timeout": timeout_s, "max_retries": max_retries,
        }
    else:
        arguments = {
            "openai": {"timeout_s": timeout_s, "max_retries": max_retries},
            "anthropic": {"timeout": timeout_s, "max_retries": max_retries},
            "ollama": {"request_timeout": timeout_s},
            "tongyi": {"request_timeout": timeout_s},
        }[provider]
        if base_url:
            arguments["base_url"] = base_url
    return arguments


def _model_resources(
    model: str, base_url: str | None, timeout_s: float, max_retries: int, api_version: str | None = None,
    limits: Dict[str, int] | None = None,
) -> tuple[ResourceDescriptor, ResourceDescriptor]:
    provider, _, name = model.partition(":")
    setup_args = dict(connection=MODEL_CONNECTION, prompt="review_analysis_prompt", tools=["notify_shipping_manager"])
    if provider == "local" and not name:
        return (
            ResourceDescriptor(clazz=ResourceName.ChatModel.LOCAL_CONNECTION, **(limits or {})),
            ResourceDescriptor(clazz=ResourceName.ChatModel.LOCAL_SETUP, model="local", **setup_args),
        )
    if provider in PROVIDERS and name:
        connection_class, setup_class, _ = PROVIDERS[provider]
        return (
            ResourceDescriptor(
                clazz=connection_class, **connection_arguments(provider, base_url, api_version, timeout_s, max_retries),
                **(limits or {}),
            ),
            ResourceDescriptor(clazz=setup_class, model=name, **setup_args),
        )
    raise ValueError(f"--model must be one of {MODEL_FORMS}, not {model!r}")


class ReviewAnalysisAgent(Agent):
    """Scores a review, notifies shipping on damage, keeps a per-product summary.

    Args:
        model: ``"local"`` or ``"PROVIDER:NAME"`` (see the module docstring).
        base_url: The provider's endpoint (Azure: the resource endpoint).
        timeout_s: Per-request timeout of provider models, seconds.
        max_retries: Retries of a failed request (the SDK's backoff; for the
            providers whose connection has the setting).
        api_version: Azure OpenAI's API version (``azure:`` only).
        limits: The model connection's rate limits (``requests_per_minute``,
            ``tokens_per_minute``, ``max_concurrent_requests``: held across
            the job's subtasks; docs/operations.md, "Rate limits").

    Raises:
        ValueError: ``model`` is none of the forms, or an ``azure:`` model
            lacks ``base_url`` or ``api_version``.
    """

    def __init__(
        self, model: str = "local", base_url: str | None = None, timeout_s: float = 60.0, max_retries: int = 2,
        api_version: str | None = None, limits: Dict[str, int] | None = None,
    ) -> None:
        super().__init__()
        connection, setup = _model_resources(model, base_url, timeout_s, max_retries, api_version, limits)
        self.add_resource(MODEL_CONNECTION, ResourceType.CHAT_MODEL_CONNECTION, connection)
        self.add_resource(MODEL_SETUP, ResourceType.CHAT_MODEL, setup)

    @prompt
    @staticmethod
    def review_analysis_prompt() -> Prompt:
        return REVIEW_PROMPT

    @tool
    @staticmethod
    def notify_shipping_manager(id: str, review: str) -> str:
        """Notify the shipping manager that a product arrived damaged.

        Args:
            id: The product id.
            review: The review text reporting the damage.
        """
        log.info("shipping manager notified about product %s: %s", id, review[:80])
        return f"shipping manager notified about product {id}"

    @action(InputEvent)
    @staticmethod
    def process_input(event: InputEvent, ctx: RunnerContext) -> None:
        review = ProductReview.model_validate(event.input)
        ctx.sensory_memory.set("review", review.model_dump(mode="json"))
        content = json.dumps({"id": review.id, "review": review.review})
        ctx.send_event(ChatRequestEvent(
            model=MODEL_SETUP, messages=[ChatMessage(role=MessageRole.USER, content=content)],
            output_schema=ReviewAnalysis,
        ))

    @action(ChatResponseEvent)
    @staticmethod
    def process_chat_response(event: ChatResponseEvent, ctx: RunnerContext) -> None:
        review = ctx.sensory_memory.get("review")
        # Validated against the request's output_schema by the runtime.
        analysis: ReviewAnalysis = event.response.extra_args[STRUCTURED_OUTPUT]
        ctx.send_event(OutputEvent(output=analysis_output(ctx.short_term_memory, review["id"], review["ts"], analysis)))


def product_id_of(review: Dict[str, Any]) -> str:
    """The key selector: reviews are keyed by product id."""
    return review["id"]


def run_locally(
    reviews: List[Dict[str, Any]], agent: Agent, key_of: Callable[[Dict[str, Any]], str] = product_id_of,
    config: Dict[str, Any] | None = None,
) -> List[Dict[str, Any]]:
    """Run ``agent`` over ``reviews`` (any records, keyed by ``key_of``) on
    the embedded local runner; ``config`` is the agent configuration
    (flat keys, docs/operations.md)."""
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    env = AgentsExecutionEnvironment.get_execution_environment(**(config or {}))
    outputs = env.from_list([{"key": key_of(r), "value": r} for r in reviews]).apply(agent).to_list()
    env.execute()
    return [output for record in outputs for output in record.values()]


def flink_environment(
    parallelism: int, checkpoint_interval_ms: int, execution_mode: str | None = "loopback", restart_attempts: int = 3
) -> Any:
    """A Flink environment with the settings the job needs: the local
    mini-cluster when run with ``python``, the cluster ``flink run``
    submits to otherwise.

    Args:
        execution_mode: Where the Python functions run
            (``flink_agents.runtime.flink.execution_mode``): ``thread``
            (CPython embedded in the TaskManager's JVM), ``process`` (Python
            worker processes beside the JVM, over gRPC, on the mini-cluster
            too), ``loopback`` (process mode, but on the mini-cluster the
            workers are threads of this process: PyFlink's default) or None:
            thread, except on a session cluster not set up for it, where
            process. See docs/performance.md.
        restart_attempts: Restarts after a failure (2 s apart) before the
            job fails; 0: the first failure fails the job.

    Raises:
        flink_agents.runtime.flink.execution_mode.ThreadModeUnsupported:
            Thread mode on a session cluster that runs only one thread-mode
            job (no flink-python in ``lib/`` or no ``pemja.`` parent-first);
            nothing was submitted.
    """
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.util.java_utils import get_j_env_configuration

    from flink_agents.runtime.flink.execution_mode import python_workers, resolve_execution_mode

    if execution_mode in (None, "thread"):
        from flink_agents.runtime.flink.environment import prepare_thread_mode

        prepare_thread_mode()
    config = Configuration()
    # Model and tool calls are journaled, so a restart replays them instead
    # of calling again; a few attempts cover a lost worker.
    if restart_attempts > 0:
        config.set_string("restart-strategy.type", "fixed-delay")
        config.set_string("restart-strategy.fixed-delay.attempts", str(restart_attempts))
        config.set_string("restart-strategy.fixed-delay.delay", "2 s")
    else:
        config.set_string("restart-strategy.type", "none")
    # Python workers must run in this interpreter (the venv), or they cannot
    # import pyflink and flink_agents.
    config.set_string("python.executable", sys.executable)
    with python_workers(execution_mode or "thread"):
        env = StreamExecutionEnvironment.get_execution_environment(config)
    # The target (mini-cluster or which cluster) is known only now: flink
    # run gives it to the environment.
    j_config = get_j_env_configuration(env._j_stream_execution_environment)
    mode = resolve_execution_mode(execution_mode, {str(k): str(v) for k, v in dict(j_config.toMap()).items()})
    j_config.setString("python.execution-mode", "thread" if mode == "thread" else "process")
    env.set_parallelism(parallelism)
    env.enable_checkpointing(checkpoint_interval_ms)
    return env


def run_on_flink(
    reviews: List[Dict[str, Any]],
    agent: Agent,
    parallelism: int = 2,
    checkpoint_interval_ms: int = 2_000,
    on_output: Any = None,
    journal_path: Path | None = None,
    execution_mode: str | None = "loopback",
    restart_attempts: int = 3,
    key_of: Callable[[Dict[str, Any]], str] = product_id_of,
    job_name: str = "review-analysis",
    config: Dict[str, Any] | None = None,
) -> List[Dict[str, Any]]:
    """Run ``agent`` over ``reviews`` as a Flink job on a local mini-cluster;
    outputs come back to this process as they are produced.

    Args:
        journal_path: SQLite journal file of this run (default: the
            runtime's default, ``flink_agents_journal.db`` in the working
            directory). A file a previous run left there is removed first:
            this run is a new job (a new job id, fresh keyed state), so it
            could never replay that journal, and no job prunes another
            job's runs (docs/durability.md, "Sharing a store").
        execution_mode: ``thread``, ``process`` (separate worker
            processes), ``loopback`` (process mode with the workers as
            threads of this process on the mini-cluster) or None (thread,
            unless the session cluster it is submitted to is not set up for
            it): ``flink_environment``.
        restart_attempts: Restarts after a failure before the job fails.
        key_of: The key selector (any JSON records, keyed by product id by default).
        job_name: The Flink job's name, also the prefix of its source's operator uids.
        config: More agent configuration (flat keys, docs/operations.md).

    Raises:
        flink_agents.runtime.flink.failures.FlinkJobFailed: The job
            failed; the message names the root Python cause.
    """
    from pyflink.common import Types

    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

    env = flink_environment(parallelism, checkpoint_interval_ms, execution_mode, restart_attempts)
    # Absolute: on a cluster a relative path would name another file on each host.
    options = {"journal.sqlite.path": str(_fresh_journal(Path(journal_path)))} if journal_path else {}
    options.update(config or {})
    agents_env = AgentsExecutionEnvironment.get_execution_environment(env, **options)
    with tempfile.TemporaryDirectory(prefix="review-analysis-") as directory:
        outputs = agents_env.from_datastream(
            _checkpointed_source(env, reviews, Path(directory), job_name), key_of, key_type=Types.STRING()
        ).apply(agent).to_datastream()
        return _collect(outputs, on_output, job_name)


def _fresh_journal(path: Path) -> Path:
    """``path``, absolute, with a previous run's SQLite journal (and its
    ``-wal`` and ``-shm`` files) removed; anything there that is not a file
    (a directory) is left for the store to report. A symbolic link is
    removed itself, never what it points to."""
    path = Path(os.path.abspath(path))
    for suffix in ("", "-wal", "-shm"):
        left = Path(f"{path}{suffix}")
        if left.is_symlink() or left.is_file():
            left.unlink()
    return path


def _checkpointed_source(env: Any, reviews: List[Dict[str, Any]], directory: Path, job_name: str) -> Any:
    """The validated records as a stream from a file source, whose position is
    checkpointed: after a failover Flink resumes it where the restored
    checkpoint left it (``from_collection`` would emit everything again)."""
    from pyflink.common import WatermarkStrategy
    from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

    path = directory / "records.jsonl"
    with open(path, "w", encoding="utf-8") as sink:
        for review in reviews:
            sink.write(json.dumps(review) + "\n")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(path)).build()
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "records").uid(f"{job_name}:source")
    return lines.map(json.loads).uid(f"{job_name}:decode")


def _collect(outputs: Any, on_output: Any, job_name: str) -> List[Dict[str, Any]]:
    """Run the job and gather its outputs, passing each to ``on_output`` as
    it arrives.

    Raises:
        flink_agents.runtime.flink.failures.FlinkJobFailed: The job
            failed; the message names the root Python cause.
    """
    from flink_agents.runtime.flink.failures import job_failures

    results: List[Dict[str, Any]] = []
    with job_failures(), outputs.execute_and_collect(job_name) as collected:
        for output in collected:
            results.append(output)
            if on_output is not None:
                on_output(output)
    return results


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, not {value}")
    return value


def positive_seconds(text: str) -> float:
    """A duration in seconds above 0 (a finite float)."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value


EXECUTION_MODE_HELP = (
    "PyFlink's python.execution-mode. thread: CPython embedded in the TaskManager's JVM (fastest; "
    "docs/performance.md). process: Python worker processes beside the JVM, on the mini-cluster too, so a "
    "crashing worker takes down neither the JVM nor this process, and Flink restarts the job from its last "
    "checkpoint. auto: thread, except on a session cluster not set up for thread mode (flink-python in "
    "lib/ and 'pemja.' parent-first, read from its REST API), where process; thread on such a cluster is "
    "refused before submission (docs/deploy.md)"
)


def add_execution_mode_argument(parser: argparse.ArgumentParser) -> None:
    """``--execution-mode thread|process|auto``, default auto (the mode the
    target supports); read with ``execution_mode_of``."""
    parser.add_argument("--execution-mode", choices=["thread", "process", "auto"], default="auto",
                        help=EXECUTION_MODE_HELP)


def execution_mode_of(args: argparse.Namespace) -> str | None:
    """``--execution-mode`` as ``flink_environment`` takes it (auto: None)."""
    return None if args.execution_mode == "auto" else args.execution_mode


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every review job shares: where it runs (``--runner``,
    ``--parallelism``, ``--execution-mode``, ``--checkpoint-interval-ms``,
    ``--restart-attempts``) and how it treats bad input and failures
    (``--skip-bad-records``, ``--verbose``); read by ``run_review_job``."""
    parser.add_argument("--runner", choices=["flink", "local"], default="flink",
                        help="Flink mini-cluster or the embedded local runner")
    parser.add_argument("--parallelism", type=positive_int, default=2, help="Flink parallelism")
    add_execution_mode_argument(parser)
    parser.add_argument("--checkpoint-interval-ms", type=positive_int, default=2_000,
                        help="Flink checkpoint interval (the collected results of a bounded job "
                             "arrive with the checkpoint after they are produced)")
    parser.add_argument("--restart-attempts", type=non_negative_int, default=3,
                        help="Flink restarts after a failure (model and tool calls are journaled, so a "
                             "restart replays them) before the job fails; 0: fail at once")
    parser.add_argument("--skip-bad-records", action="store_true",
                        help="log and count malformed lines instead of failing")
    parser.add_argument("--verbose", action="store_true", help="print the full trace of a failure")


def _arguments(argv: List[str] | None, prog: str | None = None) -> argparse.Namespace:
    parser = job_parser(
        "flink_agents.jobs.review_analysis", __doc__, prog,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="API keys come from the environment: " + ", ".join(
            f"{variable} ({provider}:)" for provider, (_, _, variable) in PROVIDERS.items() if variable
        ) + "; ollama: needs none.",
    )
    parser.add_argument("--input", type=Path, default=SAMPLE_INPUT, help="JSONL of {id, review, ts}")
    parser.add_argument("--output", type=Path, default=Path("out/review_analysis.jsonl"),
                        help="where to write one JSON line per review (replaced only when the job succeeds)")
    parser.add_argument("--model", default="local",
                        help=f"{MODEL_FORMS}; 'local' is offline and deterministic")
    parser.add_argument("--base-url", default=None,
                        help="the provider's endpoint (azure: the Azure OpenAI resource endpoint); "
                             "default the provider SDK's")
    parser.add_argument("--api-version", default=None, help="Azure OpenAI API version (azure: models)")
    parser.add_argument("--timeout-s", type=positive_seconds, default=60.0,
                        help="per-request timeout of provider models, in seconds")
    parser.add_argument("--max-retries", type=non_negative_int, default=2,
                        help="retries of a failed request (openai:, anthropic:, azure:)")
    parser.add_argument("--requests-per-minute", type=positive_int, default=None,
                        help="the model connection's request limit, held across the job's subtasks "
                             "(docs/operations.md, \"Rate limits\"); default none")
    parser.add_argument("--tokens-per-minute", type=positive_int, default=None,
                        help="the model connection's token limit (input plus output), held across the job")
    parser.add_argument("--max-concurrent-requests", type=positive_int, default=None,
                        help="the model connection's bound on requests in flight, held across the job")
    parser.add_argument("--rate-limit-scope", choices=["subtask", "job"], default="subtask",
                        help="how the job's subtasks share the limits: each takes limit // parallelism, or one "
                             "job-wide window in the journal store (docs/operations.md, \"Rate limits\")")
    add_run_arguments(parser)
    return parser.parse_args(argv)


def rate_limits_of(args: argparse.Namespace) -> Dict[str, int]:
    """The connection limits the command line set (``--requests-per-minute``,
    ``--tokens-per-minute``, ``--max-concurrent-requests``), as descriptor
    arguments; empty when none was given."""
    names = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests")
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def failure_summary(exc: BaseException) -> str:
    """One line for a failed job, naming the root Python cause: on the local
    runner the exception itself (``ActionFailed`` names action, key and
    record); on Flink the Python exception found in the Java cause chain
    (``FlinkJobFailed``), never just ``Py4JJavaError: ... hasNext``."""
    from flink_agents.runtime.errors import ActionFailed

    if isinstance(exc, ActionFailed):
        return str(exc)
    if "py4j" in sys.modules:  # the Flink runner ran: its errors are Py4J's
        from py4j.protocol import Py4JJavaError

        from flink_agents.runtime.flink.failures import FlinkJobFailed

        if isinstance(exc, Py4JJavaError):
            return str(exc if isinstance(exc, FlinkJobFailed) else FlinkJobFailed(exc))
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def main(argv: List[str] | None = None, prog: str | None = None) -> int:
    """Run the job; returns the process exit code. ``prog`` names the
    command in ``--help`` (default ``python -m flink_agents.jobs.review_analysis``)."""
    from flink_agents.jobs.review_records import BadRecordError, check_output_path

    args = _arguments(argv, prog)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        check_output_path(args.output)
        read = read_reviews(args.input, skip_bad_records=args.skip_bad_records)
        agent = ReviewAnalysisAgent(args.model, args.base_url, args.timeout_s, args.max_retries, args.api_version,
                                    rate_limits_of(args))
    except (BadRecordError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_review_job(args, read, agent, "review-analysis", config={"rate_limits.scope": args.rate_limit_scope})


def run_review_job(
    args: argparse.Namespace, read: Any, agent: Any, job_name: str, **flink_options: Any,
) -> int:
    """Run ``agent`` over the reviews ``read`` (``review_records.read_reviews``)
    on the runner ``args`` names (``add_run_arguments``), write
    ``args.output`` and report; returns the process exit code (0, or 1 with
    one line naming the root cause: ``failure_summary``). ``job_name``
    names the Flink job (and its operator uids); ``flink_options`` go to
    ``run_on_flink`` (``key_of``, ``config``: the agent configuration, also
    given to the local runner)."""
    from flink_agents.jobs.review_records import jsonl_output
    from flink_agents.runtime.flink.execution_mode import ThreadModeUnsupported

    if read.bad_lines:
        print(f"skipped {len(read.bad_lines)} bad record(s) (--skip-bad-records)", file=sys.stderr)
    started = time.monotonic()
    try:
        with jsonl_output(args.output, len(read.reviews), f"{job_name} ({args.runner})") as write:
            if args.runner == "flink":
                run_on_flink(
                    read.reviews, agent, args.parallelism, args.checkpoint_interval_ms, on_output=write,
                    journal_path=args.output.with_name(args.output.name + ".journal.db"),
                    execution_mode=execution_mode_of(args), restart_attempts=args.restart_attempts,
                    job_name=job_name, **flink_options,
                )
            else:
                for output in run_locally(read.reviews, agent, config=flink_options.get("config")):
                    write(output)
    except ThreadModeUnsupported as exc:  # refused before submission: nothing ran
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if args.verbose:
            raise
        endpoint = f" (model {args.model} at {args.base_url})" if args.base_url else ""
        print(f"error: the job failed{endpoint}: {failure_summary(exc)} (--verbose prints the full trace)",
              file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    print(
        f"{len(read.reviews)} review{'' if len(read.reviews) == 1 else 's'} -> {args.output} in {elapsed:.1f} s "
        f"({args.runner} runner; {read.skipped()})",
        file=sys.stderr,
    )
    return 0

if __name__ == "__main__":
    # Re-enter through the importable module, so the agent's functions are
    # named flink_agents.jobs.review_analysis.* (as in plans/) rather than __main__.*.
    from flink_agents.jobs.review_analysis import main as _main

    sys.exit(_main())
