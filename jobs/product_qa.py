"""The product-QA job: answer questions about a product from its reviews.

Two steps:

1. Index (once, before the stream): every review (``{"id": product id,
   "review", "ts"}``) becomes a document of a Chroma collection in a
   persist directory (``--index-dir``, default beside ``--output``),
   embedded with the offline hashing embedding (``flink_agents.jobs.review_index``). A
   later run over the same reviews reuses the index as is.
2. Stream: questions ``{"product_id", "question"}`` (optional
   ``"question_id"``, default ``"<file>:<line>"``), keyed by product id, go
   through ``ProductQAAgent``: it asks the built-in retrieval action for the
   ``--max-results`` reviews closest to the question among that product's
   reviews only (``filters={"product_id": ...}``; journaled: a replay after
   a failover does not query the store again), then answers from them. One
   JSON line per question::

    {"question_id", "product_id", "question", "answer", "review_ids", "retrieved"}

   ``review_ids``: the reviews the answer is based on (``"<product id>@<ts>"``);
   ``retrieved``: every review retrieved, closest first.

Why the index is built before the job and not by an action per review: a
user wants reviews indexed once and questions streamed against them; an
indexing action would journal one write per review on every run, and a
question could reach its key before that product's reviews did (the two
inputs have no order between them), so answers would depend on timing.

Answers: ``--model local`` (default) is offline and has no language model:
the answer quotes the retrieved sentences sharing the most words with the
question, each with its review id (``flink_agents.jobs.review_index.extractive_answer``).
``--model PROVIDER:NAME`` (as the review job: openai, anthropic, ollama,
azure, tongyi) asks that chat model, with the reviews inside an
untrusted-data block (reviews are user-written text: the model is told to
treat them as information, never as instructions) and the ids to cite.

Chroma's embedded store is used by one process at a time: on Flink in
``process`` execution mode with parallelism > 1 the Python workers are
several processes, so give ``--chroma-host`` (a server, e.g. ``chroma run
--path DIR``) there; ``thread`` mode (the default) is one process.

Run ``python -m flink_agents.jobs.product_qa --help``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.events.chat_event import ChatRequestEvent, ChatResponseEvent
from flink_agents.api.events.context_retrieval_event import (
    ContextRetrievalRequestEvent,
    ContextRetrievalResponseEvent,
)
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.resource import ResourceDescriptor, ResourceName, ResourceType
from flink_agents.api.runner_context import RunnerContext
from flink_agents.cli.job_help import job_parser
from flink_agents.runtime.features.untrusted import UNTRUSTED_NOTICE, wrap_untrusted
from flink_agents.jobs.review_analysis import (
    MODEL_FORMS, PROVIDERS, connection_arguments, non_negative_int, positive_int, positive_seconds,
)
from flink_agents.jobs.product_questions import ProductQuestion, read_questions
from flink_agents.jobs.review_index import COLLECTION, extractive_answer

__all__ = ["ProductQAAgent", "ProductQuestion", "main", "read_questions", "run_locally", "run_on_flink"]

log = logging.getLogger("flink_agents.jobs.product_qa")

DATA = Path(__file__).parent / "data"
SHARED_REVIEWS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "product_reviews.jsonl"
SAMPLE_REVIEWS = DATA / "sample_reviews.jsonl"
SHARED_QUESTIONS = DATA / "product_questions.jsonl"
SAMPLE_QUESTIONS = DATA / "product_questions_sample.jsonl"
STORE = "review_store"
EMBEDDING = "review_embedding"
EMBEDDING_CONNECTION = "review_embedding_connection"
MODEL_SETUP = "product_qa_model"
MODEL_CONNECTION = "product_qa_model_connection"
SYSTEM_PROMPT = (
    "You answer questions about one product from its customer reviews. Use only what the reviews say; if they "
    "do not answer the question, say so. Answer in at most three sentences and cite the ids of the reviews you "
    "used in square brackets, e.g. [B000000000@1700000000]. " + UNTRUSTED_NOTICE
)


def _chat_model(model: str, base_url: str | None, timeout_s: float, max_retries: int,
                api_version: str | None) -> tuple[ResourceDescriptor, ResourceDescriptor] | None:
    """The chat model's connection and setup, or None for ``local``.

    Raises:
        ValueError: ``model`` is none of the forms.
    """
    provider, _, name = model.partition(":")
    if provider == "local" and not name:
        return None
    if provider in PROVIDERS and name:
        connection_class, setup_class, _ = PROVIDERS[provider]
        return (
            ResourceDescriptor(
                clazz=connection_class, **connection_arguments(provider, base_url, api_version, timeout_s, max_retries)
            ),
            ResourceDescriptor(clazz=setup_class, connection=MODEL_CONNECTION, model=name),
        )
    raise ValueError(f"--model must be one of {MODEL_FORMS}, not {model!r}")


class ProductQAAgent(Agent):
    """Answers a product question from that product's reviews (module docstring).

    Args:
        index_dir: The Chroma persist directory built by
            ``flink_agents.jobs.review_index.build_review_index`` (ignored with ``chroma_host``).
        dimensions: The hashing embedding's length; must be the index's.
        max_results: Reviews retrieved per question (>= 1).
        model: ``"local"`` or ``"PROVIDER:NAME"``.
        base_url, timeout_s, max_retries, api_version: The chat model's
            connection settings (as the review job's).
        chroma_host, chroma_port: A Chroma server holding the index instead.

    Raises:
        ValueError: ``model`` is none of the forms, or ``max_results`` < 1.
    """

    def __init__(
        self, index_dir: str = "out/product_qa.index", dimensions: int = 256, max_results: int = 6,
        model: str = "local", base_url: str | None = None, timeout_s: float = 60.0, max_retries: int = 2,
        api_version: str | None = None, chroma_host: str | None = None, chroma_port: int | None = None,
    ) -> None:
        super().__init__()
        if max_results < 1:
            raise ValueError(f"max_results must be at least 1, not {max_results}")
        location = {"host": chroma_host, "port": chroma_port} if chroma_host else {"persist_directory": str(index_dir)}
        self.add_resource(EMBEDDING_CONNECTION, ResourceType.EMBEDDING_MODEL_CONNECTION, ResourceDescriptor(
            clazz=ResourceName.EmbeddingModel.HASHING_CONNECTION, dimensions=dimensions))
        self.add_resource(EMBEDDING, ResourceType.EMBEDDING_MODEL, ResourceDescriptor(
            clazz=ResourceName.EmbeddingModel.HASHING_SETUP, connection=EMBEDDING_CONNECTION))
        self.add_resource(STORE, ResourceType.VECTOR_STORE, ResourceDescriptor(
            clazz=ResourceName.VectorStore.CHROMA_VECTOR_STORE, embedding_model=EMBEDDING, collection=COLLECTION,
            auto_create_collection=False, **location))
        chat = _chat_model(model, base_url, timeout_s, max_retries, api_version)
        if chat is not None:
            self.add_resource(MODEL_CONNECTION, ResourceType.CHAT_MODEL_CONNECTION, chat[0])
            self.add_resource(MODEL_SETUP, ResourceType.CHAT_MODEL, chat[1])
        self.add_action("retrieve", [InputEvent], retrieve, max_results=max_results)
        self.add_action(
            "answer", [ContextRetrievalResponseEvent], answer, max_results=max_results, chat_model=chat is not None
        )
        if chat is not None:
            self.add_action("reply", [ChatResponseEvent], reply)


def retrieve(event: InputEvent, ctx: RunnerContext) -> None:
    """Ask for the reviews of the question's product closest to the question
    (twice the action config ``max_results``; ``answer`` keeps that many)."""
    question = ProductQuestion.model_validate(event.input)
    ctx.sensory_memory.set("question", question.model_dump())
    ctx.send_event(ContextRetrievalRequestEvent(
        # Twice as many as used: stores order equally distant documents
        # (a review posted twice) arbitrarily, so the ``max_results`` kept
        # are chosen here, by distance then id (``answer``).
        query=question.question, vector_store=STORE, max_results=2 * int(ctx.get_action_config_value("max_results")),
        filters={"product_id": question.product_id},
    ))


def answer(event: ContextRetrievalResponseEvent, ctx: RunnerContext) -> None:
    """Answer from the ``max_results`` closest retrieved reviews (ties by
    id): extractive, or (action config ``chat_model``) by the chat model.

    Raises:
        RuntimeError: A retrieved review is of another product than the
            question's (names both).
    """
    question = ProductQuestion.model_validate(ctx.sensory_memory.get("question"))
    # Closest first; reviews at the same distance (the same text, posted
    # twice) by id, so the answer does not depend on the store's tie order.
    documents = sorted(event.documents, key=lambda d: (round(d.score or 0.0, 6), str(d.id)))
    documents = documents[: int(ctx.get_action_config_value("max_results"))]
    for document in documents:
        if document.metadata.get("product_id") != question.product_id:
            raise RuntimeError(
                f"question {question.question_id}: retrieval returned review {document.id} of product "
                f"{document.metadata.get('product_id')!r}, not of {question.product_id!r} (the store ignored "
                "the request's filters)"
            )
    retrieved = [str(document.id) for document in documents]
    if not documents or not ctx.get_action_config_value("chat_model"):
        found = extractive_answer(question.question, documents)
        _emit(ctx, question, found["answer"], found["review_ids"], retrieved)
        return
    ctx.sensory_memory.set("retrieved", retrieved)
    reviews = "\n".join(f"[{d.id}] {d.content}" for d in documents)
    content = (
        f"Reviews of product {question.product_id}:\n"
        f"{wrap_untrusted(reviews, f'customer reviews of {question.product_id}')}\n\n"
        f"Question: {question.question}"
    )
    ctx.send_event(ChatRequestEvent(model=MODEL_SETUP, messages=[
        ChatMessage(role=MessageRole.SYSTEM, content=SYSTEM_PROMPT),
        ChatMessage(role=MessageRole.USER, content=content),
    ]))


def reply(event: ChatResponseEvent, ctx: RunnerContext) -> None:
    """Emit the chat model's answer; ``review_ids``: the retrieved ids it cites."""
    question = ProductQuestion.model_validate(ctx.sensory_memory.get("question"))
    retrieved: List[str] = ctx.sensory_memory.get("retrieved")
    text = (event.response.content or "").strip()
    _emit(ctx, question, text, [rid for rid in retrieved if rid in text], retrieved)


def _emit(ctx: RunnerContext, question: ProductQuestion, answer: str, review_ids: List[str],
          retrieved: List[str]) -> None:
    ctx.send_event(OutputEvent(output={
        "question_id": question.question_id, "product_id": question.product_id, "question": question.question,
        "answer": answer, "review_ids": review_ids, "retrieved": retrieved,
    }))


def product_id_of(question: Dict[str, Any]) -> str:
    """The key selector: questions are keyed by product id."""
    return question["product_id"]


def run_locally(questions: List[Dict[str, Any]], agent: Agent) -> List[Dict[str, Any]]:
    """Run ``agent`` over ``questions`` on the embedded local runner."""
    from flink_agents.jobs.review_analysis import run_locally as run_records_locally

    return run_records_locally(questions, agent, key_of=product_id_of)


def run_on_flink(
    questions: List[Dict[str, Any]],
    agent: Agent,
    parallelism: int = 2,
    checkpoint_interval_ms: int = 2_000,
    on_output: Any = None,
    journal_path: Path | None = None,
    execution_mode: str = "thread",
    restart_attempts: int = 3,
) -> List[Dict[str, Any]]:
    """Run ``agent`` over ``questions`` as a Flink job on a local
    mini-cluster (``flink_agents.jobs.review_analysis.run_on_flink``: a checkpointed file
    source, so a failover does not emit the questions again); outputs come
    back to this process as they are produced.

    Raises:
        flink_agents.runtime.flink.failures.FlinkJobFailed: The job failed;
            the message names the root Python cause.
    """
    from flink_agents.jobs.review_analysis import run_on_flink as run_records_on_flink

    return run_records_on_flink(
        questions, agent, parallelism, checkpoint_interval_ms, on_output, journal_path, execution_mode,
        restart_attempts, key_of=product_id_of, job_name="product-qa",
    )


def _arguments(argv: List[str] | None, prog: str | None = None) -> argparse.Namespace:
    default_reviews = SHARED_REVIEWS if SHARED_REVIEWS.is_file() else SAMPLE_REVIEWS
    parser = job_parser("flink_agents.jobs.product_qa", __doc__, prog)
    parser.add_argument("--reviews", type=Path, default=default_reviews,
                        help="JSONL of {id, review, ts} (default: ../shared/data/product_reviews.jsonl, else the "
                             "bundled sample)")
    parser.add_argument("--questions", type=Path, default=None,
                        help="JSONL of {product_id, question} (default: jobs/data/product_questions.jsonl for the "
                             "shared reviews, jobs/data/product_questions_sample.jsonl for the sample)")
    parser.add_argument("--output", type=Path, default=Path("out/product_qa.jsonl"),
                        help="one JSON line per question, replaced only when the job succeeds (default: %(default)s)")
    parser.add_argument("--index-dir", type=Path, default=None,
                        help="Chroma persist directory of the review index (default: the output path with suffix .index)")
    parser.add_argument("--chroma-host", default=None, help="index into and query a Chroma server instead")
    parser.add_argument("--chroma-port", type=int, default=8000, help="the Chroma server's port (default: %(default)s)")
    parser.add_argument("--dimensions", type=positive_int, default=256, help="hashing embedding length (default: %(default)s)")
    parser.add_argument("--max-results", type=positive_int, default=6, help="reviews retrieved per question (default: %(default)s)")
    parser.add_argument("--model", default="local", help=f"{MODEL_FORMS}; 'local' (the default) answers extractively, offline")
    parser.add_argument("--base-url", default=None, help="the provider's endpoint")
    parser.add_argument("--api-version", default=None, help="Azure OpenAI API version (azure: models)")
    parser.add_argument("--timeout-s", type=positive_seconds, default=60.0, help="per-request timeout of provider models in seconds (default: %(default)s)")
    parser.add_argument("--max-retries", type=non_negative_int, default=2, help="retries of a failed model request (default: %(default)s)")
    parser.add_argument("--runner", choices=["flink", "local"], default="flink",
                        help="Flink mini-cluster or the embedded local runner (default: %(default)s)")
    parser.add_argument("--parallelism", type=positive_int, default=2, help="Flink parallelism (default: %(default)s)")
    parser.add_argument("--execution-mode", choices=["thread", "process"], default="thread",
                        help="PyFlink python.execution-mode (default: %(default)s; process with parallelism > 1 needs --chroma-host)")
    parser.add_argument("--checkpoint-interval-ms", type=positive_int, default=2_000, help="Flink checkpoint interval (default: %(default)s)")
    parser.add_argument("--restart-attempts", type=int, default=3, help="Flink restarts after a failure (default: %(default)s)")
    parser.add_argument("--verbose", action="store_true", help="print the full trace of a failure")
    args = parser.parse_args(argv)
    if args.questions is None:
        args.questions = SAMPLE_QUESTIONS if args.reviews.resolve() == SAMPLE_REVIEWS.resolve() else SHARED_QUESTIONS
    if args.index_dir is None:
        args.index_dir = args.output.with_suffix(".index")
    return args


def main(argv: List[str] | None = None, prog: str | None = None) -> int:
    """Run the job; returns the process exit code. ``prog`` names the
    command in ``--help`` (``flink-agents run product-qa``; default
    ``python -m flink_agents.jobs.product_qa``)."""
    from flink_agents.jobs.review_analysis import failure_summary
    from flink_agents.jobs.review_index import build_review_index
    from flink_agents.jobs.review_records import BadRecordError, check_output_path, jsonl_output, read_reviews

    args = _arguments(argv, prog)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        check_output_path(args.output)
        if args.runner == "flink" and args.execution_mode == "process" and args.parallelism > 1 \
                and not args.chroma_host:
            raise ValueError(
                "--execution-mode process with --parallelism > 1 runs several Python processes, and an embedded "
                "Chroma directory serves one process: give --chroma-host, --parallelism 1 or --execution-mode thread"
            )
        reviews = read_reviews(args.reviews).reviews
        questions = read_questions(args.questions)
        agent = ProductQAAgent(
            str(args.index_dir), args.dimensions, args.max_results, args.model, args.base_url, args.timeout_s,
            args.max_retries, args.api_version, args.chroma_host, args.chroma_port,
        )
        index = build_review_index(reviews, args.index_dir, args.dimensions, args.chroma_host, args.chroma_port)
    except (BadRecordError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"review index: {index.reviews} reviews in {index.directory} "
        f"({'reused' if index.reused else f'built in {index.seconds:.1f} s'})",
        file=sys.stderr,
    )
    started = time.monotonic()
    try:
        with jsonl_output(args.output, len(questions), f"product-qa ({args.runner})", unit="question") as write:
            if args.runner == "flink":
                run_on_flink(
                    questions, agent, args.parallelism, args.checkpoint_interval_ms, on_output=write,
                    journal_path=args.output.with_name(args.output.name + ".journal.db"),
                    execution_mode=args.execution_mode, restart_attempts=args.restart_attempts,
                )
            else:
                for output in run_locally(questions, agent):
                    write(output)
    except Exception as exc:
        if args.verbose:
            raise
        print(f"error: the job failed: {failure_summary(exc)} (--verbose prints the full trace)", file=sys.stderr)
        return 1
    print(
        f"{len(questions)} questions -> {args.output} in {time.monotonic() - started:.1f} s ({args.runner} runner)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    # Re-enter through the importable module, so the agent's functions are
    # named flink_agents.jobs.product_qa.* (as in plans/) rather than __main__.*.
    from flink_agents.jobs.product_qa import main as _main

    sys.exit(_main())
