"""The review-analysis job with a Pydantic AI agent: typed scores on Flink.

The same job as ``flink_agents.jobs.review_analysis`` (reviews ``{"id",
"review", "ts"}`` keyed by product id, one JSON line per review ``{"id",
"ts", "score", "reasons", "reviews_seen", "mean_score"}``), but the review is
scored by a ``pydantic_ai.Agent`` whose output type is ``ReviewAnalysis``
(score 1-5, reasons): Pydantic AI validates the answer (its ``final_result``
output tool) and asks again on a mismatch; the agent calls
``notify_shipping_manager`` first when a review reports shipping damage. The
agent runs durably inside the action (``integrations.frameworks
.pydantic_ai.run_durably``): its model requests and tool calls are
journaled, so a restart replays them instead of asking or notifying again.

Run ``python -m flink_agents.jobs.review_analysis_pydantic_ai --help``.
``--model openai:NAME`` talks to any OpenAI-compatible chat-completions
server (``--base-url``; key from ``OPENAI_API_KEY``, which a server at
``--base-url`` may do without). Needs ``pip install 'flink-agents-runtime[pydantic-ai]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import sys
import weakref
from pathlib import Path
from typing import Any, Dict, List, Tuple

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.api.runner_context import RunnerContext
from flink_agents.cli.job_help import job_parser
from flink_agents.jobs.review_analysis import (
    SAMPLE_INPUT, add_run_arguments, non_negative_int, positive_seconds, run_review_job,
)
from flink_agents.jobs.review_records import ProductReview, ReviewAnalysis, analysis_output, read_reviews

__all__ = ["INSTRUCTIONS", "ReviewAnalysisPydanticAIAgent", "analyze_review", "main", "review_agent"]

log = logging.getLogger("flink_agents.jobs.review_analysis_pydantic_ai")

AGENT_NAME = "review_analysis"
INSTRUCTIONS = (
    "You analyze product reviews. For the review you are given (JSON with the product id and the review text), "
    "give a score (integer 1-5, 5 is most satisfied) and up to 3 short reasons for the score. "
    "If the review reports that the product arrived damaged (broken, crushed, dented, wet from shipping), "
    "first call the tool notify_shipping_manager with the product id and the review text, then answer."
)
NO_KEY = "no-key"  # sent when OPENAI_API_KEY is unset and a --base-url server needs none

# One Pydantic AI agent per event loop and settings: it holds the SDK
# client, whose connection pool belongs to the loop it first ran on (an
# operator subtask has a loop of its own; thread mode runs several in one
# interpreter).
_AGENTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[Tuple[Any, ...], Any]]" = (
    weakref.WeakKeyDictionary()
)


def notify_shipping_manager(id: str, review: str) -> str:
    """Notify the shipping manager that a product arrived damaged.

    Args:
        id: The product id.
        review: The review text reporting the damage.
    """
    log.info("shipping manager notified about product %s: %s", id, review[:80])
    return f"shipping manager notified about product {id}"


def parse_model(model: str) -> str:
    """The model name of ``openai:NAME``.

    Raises:
        ValueError: ``model`` is not of that form.
    """
    provider, _, name = model.partition(":")
    if provider != "openai" or not name:
        raise ValueError(f"--model must be 'openai:NAME' (an OpenAI-compatible chat-completions model), not {model!r}")
    return name


def review_agent(model: str, base_url: str | None, timeout_s: float = 60.0, max_retries: int = 2) -> Any:
    """The Pydantic AI agent (cached per settings and running loop): an
    ``OpenAIChatModel`` (chat completions, never the Responses API) at
    ``base_url``, ``ReviewAnalysis`` output, the notification tool.

    Raises:
        ValueError: ``model`` is not ``openai:NAME``, or neither
            ``OPENAI_API_KEY`` nor ``base_url`` is set.
    """
    name = parse_model(model)
    key = (name, base_url, timeout_s, max_retries)
    agents = _AGENTS.setdefault(asyncio.get_running_loop(), {})
    agent = agents.get(key)
    if agent is None:
        from openai import AsyncOpenAI
        from pydantic_ai import Agent as PydanticAgent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        api_key = os.environ.get("OPENAI_API_KEY")
        if not api_key and not base_url:
            raise ValueError("openai: models need OPENAI_API_KEY (or a --base-url server that needs no key)")
        client = AsyncOpenAI(base_url=base_url, api_key=api_key or NO_KEY, timeout=timeout_s, max_retries=max_retries)
        agent = PydanticAgent(
            OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client)),
            name=AGENT_NAME, output_type=ReviewAnalysis, instructions=INSTRUCTIONS,
            tools=[notify_shipping_manager],
        )
        agents[key] = agent
    return agent


async def analyze_review(event: InputEvent, ctx: RunnerContext) -> None:
    """The agent's action: score the review with the Pydantic AI agent
    (durably), update the product's summary, output one record."""
    from flink_agents.integrations.frameworks.pydantic_ai import run_durably

    review = ProductReview.model_validate(event.input)
    agent = review_agent(
        ctx.get_action_config_value("model"), ctx.get_action_config_value("base_url"),
        float(ctx.get_action_config_value("timeout_s", 60.0)), int(ctx.get_action_config_value("max_retries", 2)),
    )
    result = await run_durably(ctx, agent, json.dumps({"id": review.id, "review": review.review}))
    analysis: ReviewAnalysis = result.output
    ctx.send_event(OutputEvent(output=analysis_output(ctx.short_term_memory, review.id, review.ts, analysis)))


class ReviewAnalysisPydanticAIAgent(Agent):
    """Scores a review with a Pydantic AI agent, keeps a per-product summary.

    Args:
        model: ``"openai:NAME"``.
        base_url: The OpenAI-compatible server (default: OpenAI's).
        timeout_s: Per-request timeout, seconds.
        max_retries: Retries of a failed request (the SDK's backoff).

    Raises:
        ValueError: ``model`` is not ``openai:NAME``.
    """

    def __init__(self, model: str = "openai:gpt-4o-mini", base_url: str | None = None, timeout_s: float = 60.0,
                 max_retries: int = 2) -> None:
        super().__init__()
        parse_model(model)
        self.add_action("analyze_review", [InputEvent], analyze_review, model=model, base_url=base_url,
                        timeout_s=timeout_s, max_retries=max_retries)


def _arguments(argv: List[str] | None, prog: str | None = None) -> argparse.Namespace:
    parser = job_parser(
        "flink_agents.jobs.review_analysis_pydantic_ai", __doc__, prog,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="The API key comes from OPENAI_API_KEY (a --base-url server may need none).",
    )
    parser.add_argument("--input", type=Path, default=SAMPLE_INPUT, help="JSONL of {id, review, ts}")
    parser.add_argument("--output", type=Path, default=Path("out/review_analysis_pydantic_ai.jsonl"),
                        help="where to write one JSON line per review (replaced only when the job succeeds)")
    parser.add_argument("--model", default="openai:gpt-4o-mini", help="'openai:NAME': a chat-completions model")
    parser.add_argument("--base-url", default=None,
                        help="the OpenAI-compatible server, e.g. http://localhost:8000/v1; default OpenAI's")
    parser.add_argument("--timeout-s", type=positive_seconds, default=60.0, help="per-request timeout, in seconds")
    parser.add_argument("--max-retries", type=non_negative_int, default=2, help="retries of a failed request")
    add_run_arguments(parser)
    return parser.parse_args(argv)


def main(argv: List[str] | None = None, prog: str | None = None) -> int:
    """Run the job; returns the process exit code. ``prog`` names the
    command in ``--help`` (the ``flink-agents run`` form; default the
    ``python -m`` form)."""
    from flink_agents.jobs.review_records import BadRecordError, check_output_path

    args = _arguments(argv, prog)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if importlib.util.find_spec("pydantic_ai") is None:
        print("error: this job needs Pydantic AI: pip install 'flink-agents-runtime[pydantic-ai]'", file=sys.stderr)
        return 2
    try:
        check_output_path(args.output)
        read = read_reviews(args.input, skip_bad_records=args.skip_bad_records)
        agent = ReviewAnalysisPydanticAIAgent(args.model, args.base_url, args.timeout_s, args.max_retries)
        if not os.environ.get("OPENAI_API_KEY") and not args.base_url:
            raise ValueError("openai: models need OPENAI_API_KEY (or a --base-url server that needs no key)")
    except (BadRecordError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_review_job(args, read, agent, "review-analysis-pydantic-ai")

if __name__ == "__main__":
    # Re-enter through the importable module, so the action is named
    # flink_agents.jobs.review_analysis_pydantic_ai.analyze_review rather than __main__.*.
    from flink_agents.jobs.review_analysis_pydantic_ai import main as _main

    sys.exit(_main())
